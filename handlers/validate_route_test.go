package handlers

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// specRoutes.find answers as kin-openapi's router over every path of the spec with every
// method, with variables of every kind of text, and over paths of no route: the same route,
// operation and parameters whenever it answers at all.
func TestSpecRoutesFindWhatTheRouterFinds(t *testing.T) {
	v, err := newSpecValidator()
	require.NoError(t, err)
	values := []string{"1", "42", "sales_daily", "a.b", "x:y+z", "scheduled__2026-01-01T00:00:00+00:00",
		".", "..", "", "claim", "dry_run", "a b", "é", "%41", "a%2Fb", "*", "~x", "a@b;c=d&e$f,g"}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}
	var paths []string
	for _, tmpl := range v.routes.paths {
		for _, val := range values {
			p := tmpl.path
			for _, name := range tmpl.names {
				if name != "" {
					p = strings.Replace(p, "{"+name+"}", val, 1)
				}
			}
			paths = append(paths, p, p+"/", p+"/x", "/api/v2"+p)
		}
	}
	paths = append(paths, "/", "//", "/api/v1", "/api/v1/", "/nowhere", "/api/v1/runs/claim/")
	found := 0
	for _, p := range paths {
		u, err := url.Parse("http://service" + p)
		if err != nil {
			continue
		}
		for _, m := range methods {
			r := httptest.NewRequest(m, "/", nil)
			r.URL = u
			route, params := v.routes.find(r)
			if route == nil {
				continue
			}
			found++
			want, wantParams, err := v.router.FindRoute(r)
			require.NoError(t, err, "%s %s", m, p)
			require.Equal(t, want.Path, route.Path, "%s %s", m, p)
			require.Equal(t, want.Method, route.Method, "%s %s", m, p)
			require.Same(t, want.Operation, route.Operation, "%s %s", m, p)
			require.Same(t, want.PathItem, route.PathItem, "%s %s", m, p)
			require.Same(t, want.Server, route.Server, "%s %s", m, p)
			require.Same(t, want.Spec, route.Spec, "%s %s", m, p)
			require.Equal(t, wantParams, params, "%s %s", m, p)
		}
	}
	require.Greater(t, found, 100, "find answered almost nothing")

	// A worker's requests are found without the router.
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/runs/claim"},
		{http.MethodPatch, "/api/v1/dags/sales_daily/runs/scheduled__2026-01-01T00:00:00+00:00"},
		{http.MethodPost, "/api/v1/runs/7/heartbeat"},
	} {
		route, _ := v.routes.find(httptest.NewRequest(c.method, c.path, nil))
		require.NotNil(t, route, "%s %s", c.method, c.path)
	}
}

package handlers

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fast path takes exactly the GETs that kin-openapi would pass on their path alone, and
// leaves every other request, valid or not, to kin-openapi.
func TestIDRoutesTakeOnlyGETsValidByTheirPath(t *testing.T) {
	v, err := newSpecValidator()
	require.NoError(t, err)
	var routes []string
	for _, segs := range v.idRoutes.templates {
		routes = append(routes, "/"+strings.Join(segs, "/"))
	}
	slices.Sort(routes)
	require.Contains(t, routes, "/api/v1/backfills/", "GET /backfills/{backfill_id} is the polled route")
	for _, r := range routes {
		require.NotContains(t, r, "/dags/", "a dag_id path parameter has a pattern to check: %s", r)
	}

	for _, tc := range []struct {
		method, target string
		fast           bool
	}{
		{http.MethodGet, "/api/v1/backfills/1", true},
		{http.MethodGet, "/api/v1/backfills/9223372036854775807", true},
		{http.MethodGet, "/api/v1/backfills/9223372036854775808", false}, // out of int64: kin-openapi's 400
		{http.MethodGet, "/api/v1/backfills/0", false},                   // below minimum: kin-openapi's 400
		{http.MethodGet, "/api/v1/backfills/-1", false},
		{http.MethodGet, "/api/v1/backfills/01", false},
		{http.MethodGet, "/api/v1/backfills/1x", false},
		{http.MethodGet, "/api/v1/backfills/", false},
		{http.MethodGet, "/api/v1/backfills/1/", false},
		{http.MethodGet, "/api/v1/backfills/1?x=1", false}, // a query string is kin-openapi's to check
		{http.MethodGet, "/api/v1/backfills/1?", false},
		{http.MethodGet, "/api/v1/backfills/%31", false},
		{http.MethodGet, "/api/v1/backfills/1/nope", false},
		{http.MethodGet, "/api/v1/backfills", false},
		{http.MethodPatch, "/api/v1/backfills/1", false},
		{http.MethodHead, "/api/v1/backfills/1", false},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		require.Equal(t, tc.fast, v.idRoutes.match(r), "%s %s", tc.method, tc.target)
	}
}

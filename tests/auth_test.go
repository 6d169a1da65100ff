package tests

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// Two accepted tokens, as during a rotation. authTokenA has a prefix that is not a token.
const (
	authTokenA = "s3cret-token-alpha-0001"
	authTokenB = "s3cret-token-beta-0002"
)

// authRoute is one /api/v1 operation with a request that succeeds with a valid token. Its
// path may hold {backfill}, {run} and {webhook}: the ids that earlier routes' answers gave
// (saves), so that no route assumes what id the database hands out.
type authRoute struct {
	method, path string
	body         any
	want         int
	saves        string // the placeholder this route's answer fills, "" for none
}

// authIDs maps a placeholder of authRoute.path to the id an earlier answer carried.
type authIDs map[string]int64

// resolve fills the placeholders of path. An unfilled placeholder stays, and the request
// then fails with a message that names it.
func (ids authIDs) resolve(path string) string {
	for name, id := range ids {
		path = strings.ReplaceAll(path, name, strconv.FormatInt(id, 10))
	}
	return path
}

// save reads the id of an answer: an object with an id (a backfill, a webhook), or a claim's
// first run.
func (ids authIDs) save(t *testing.T, name string, res *response) {
	t.Helper()
	var answer struct {
		ID   *int64 `json:"id"`
		Runs []struct {
			ID int64 `json:"id"`
		} `json:"runs"`
	}
	res.Decode(t, &answer)
	switch {
	case answer.ID != nil:
		ids[name] = *answer.ID
	case len(answer.Runs) > 0:
		ids[name] = answer.Runs[0].ID
	default:
		t.Fatalf("the answer that fills %s carries no id: %s", name, res.Body)
	}
}

// authGroupBody creates a group of one DAG of its own (auth_dag has a backfill by then).
var authGroupBody = map[string]any{"dag_ids": []string{"auth_group_dag"}, "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"}

// authRoutes returns a request for every /api/v1 operation of the spec, in an order in which
// each one succeeds against e: the DAG, a manual run, a backfill, then actions on them.
func authRoutes(e *env) []authRoute {
	return []authRoute{
		{http.MethodPut, "/api/v1/dags/auth_dag", map[string]any{"schedule": "@daily"}, http.StatusCreated, ""},
		{http.MethodGet, "/api/v1/dags", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/dags/auth_dag", nil, http.StatusOK, ""},
		{http.MethodPost, "/api/v1/dags/auth_dag/runs", map[string]any{"logical_date": "2024-02-01T00:00:00Z"}, http.StatusCreated, ""},
		{http.MethodGet, "/api/v1/dags/auth_dag/runs", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/dags/auth_dag/runs/manual__2024-02-01T00:00:00Z", nil, http.StatusOK, ""},
		{http.MethodPatch, "/api/v1/dags/auth_dag/runs/manual__2024-02-01T00:00:00Z", map[string]any{"state": "success"}, http.StatusOK, ""},
		{http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("auth_dag", day(1, 1), day(1, 5)), http.StatusOK, ""},
		{http.MethodPost, "/api/v1/backfills", backfillBody("auth_dag", day(1, 1), day(1, 5)), http.StatusCreated, "{backfill}"},
		{http.MethodGet, "/api/v1/backfills", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/backfills/{backfill}", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/backfills/{backfill}/dag_runs", nil, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/backfills/{backfill}/pause", nil, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/backfills/{backfill}/unpause", nil, http.StatusOK, ""},
		{http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": "auth_worker"}, http.StatusOK, "{run}"},
		{http.MethodPost, "/api/v1/runs/{run}/heartbeat", map[string]any{"worker_id": "auth_worker"}, http.StatusOK, ""},
		{http.MethodPatch, "/api/v1/backfills/{backfill}", map[string]any{"max_active_runs": 3}, http.StatusOK, ""},
		{http.MethodPost, "/api/v1/runs/{run}/release", map[string]any{"worker_id": "auth_worker"}, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/backfills/{backfill}/cancel", nil, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/dags/auth_group_dag", map[string]any{"schedule": "@daily"}, http.StatusCreated, ""},
		{http.MethodPost, "/api/v1/backfill_groups/dry_run", authGroupBody, http.StatusOK, ""},
		{http.MethodPost, "/api/v1/backfill_groups", authGroupBody, http.StatusCreated, "{group}"},
		{http.MethodGet, "/api/v1/backfill_groups", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/backfill_groups/{group}", nil, http.StatusOK, ""},
		{http.MethodPatch, "/api/v1/backfill_groups/{group}", map[string]any{"priority": 2}, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/backfill_groups/{group}/pause", nil, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/backfill_groups/{group}/unpause", nil, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/backfill_groups/{group}/cancel", nil, http.StatusOK, ""},
		{http.MethodPut, "/api/v1/pools/auth_pool", map[string]any{"slots": 2}, http.StatusCreated, ""},
		{http.MethodGet, "/api/v1/pools", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/pools/auth_pool", nil, http.StatusOK, ""},
		{http.MethodDelete, "/api/v1/pools/auth_pool", nil, http.StatusNoContent, ""},
		{http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com/hook"}, http.StatusCreated, "{webhook}"},
		{http.MethodGet, "/api/v1/webhooks", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/webhooks/{webhook}", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/webhooks/{webhook}/deliveries", nil, http.StatusOK, ""},
		{http.MethodDelete, "/api/v1/webhooks/{webhook}", nil, http.StatusNoContent, ""},
		{http.MethodPost, "/api/v1/backfills/{backfill}/retry", nil, http.StatusCreated, ""},
		{http.MethodDelete, "/api/v1/dags/auth_dag", nil, http.StatusConflict, ""},
		{http.MethodGet, "/api/v1/events", nil, http.StatusOK, ""},
		{http.MethodGet, "/api/v1/backfills/{backfill}/events", nil, http.StatusOK, ""},
	}
}

// With API_TOKEN set, every /api/v1 route refuses a request without a valid bearer token
// with 401 problem+json and WWW-Authenticate, writes nothing for it, and serves either
// rotated token; the operations routes stay open.
func TestAuthEveryAPIRouteNeedsAValidBearerToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens(authTokenA, authTokenB))
	routes := authRoutes(e)

	// The list covers every /api/v1 operation of the spec.
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	require.NoError(t, err)
	covered := map[string]bool{}
	unresolved := authIDs{"{backfill}": 0, "{run}": 0, "{webhook}": 0, "{group}": 0}
	for _, r := range routes {
		covered[r.method+" "+authTemplate(doc, unresolved.resolve(r.path))] = true
	}
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/api/v1/") {
			continue
		}
		for method := range item.Operations() {
			require.True(t, covered[method+" "+path], "%s %s has no case in authRoutes", method, path)
		}
	}

	badAuth := []struct {
		name   string
		header string // "" sends no Authorization header
	}{
		{"missing", ""},
		{"empty bearer", "Bearer "},
		{"wrong token", "Bearer not-a-token"},
		{"prefix of a valid token", "Bearer " + authTokenA[:len(authTokenA)-1]},
		{"valid token plus a character", "Bearer " + authTokenA + "1"},
		{"both tokens comma-separated", "Bearer " + authTokenA + "," + authTokenB},
		{"token in another case", "Bearer " + strings.ToUpper(authTokenA)},
		{"token with a space inside", "Bearer " + authTokenA[:4] + " " + authTokenA[4:]},
		{"Basic scheme", "Basic " + authTokenA},
		{"token without scheme", authTokenA},
		{"Token scheme", "Token " + authTokenA},
	}
	rows := func() map[string]int { return e.countRows(e.publicTables()...) }

	ids := authIDs{}
	for i, r := range routes {
		path := ids.resolve(r.path)
		for _, bad := range badAuth {
			before := rows()
			e.Token = ""
			var headers []string
			if bad.header != "" {
				headers = []string{"Authorization", bad.header}
			}
			res := e.Do(r.method, path, r.body, headers...)
			requireProblem(t, res, http.StatusUnauthorized, "unauthorized", r.method, " ", path, " with ", bad.name)
			require.True(t, strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer"),
				"%s %s: WWW-Authenticate %q", r.method, path, res.Header.Get("WWW-Authenticate"))
			require.Equal(t, before, rows(), "%s %s with %s wrote something", r.method, path, bad.name)
		}
		// Rotation: both tokens are accepted; alternate them.
		e.Token = []string{authTokenA, authTokenB}[i%2]
		res := e.Do(r.method, path, r.body)
		require.Equal(t, r.want, res.Status, "%s %s with a valid token: %s", r.method, path, res.Body)
		require.Empty(t, res.Header.Get("WWW-Authenticate"))
		if r.saves != "" {
			ids.save(t, r.saves, res)
		}
	}

	// The operations routes need no token. (Raw requests: the harness's response check
	// reads a YAML body as a YAML document, not as the string the spec declares.)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		res, err := e.HTTP.Get(e.URL + path)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "%s without a token", path)
	}
}

// authTemplate maps a concrete path to its spec template, preferring literal segments
// (/backfills/dry_run over /backfills/{backfill_id}).
func authTemplate(doc *openapi3.T, path string) string {
	if doc.Paths.Value(path) != nil {
		return path
	}
	parts := strings.Split(path, "/")
	for tmpl := range doc.Paths.Map() {
		tp := strings.Split(tmpl, "/")
		if len(tp) != len(parts) {
			continue
		}
		ok := true
		for i := range tp {
			if tp[i] != parts[i] && !strings.HasPrefix(tp[i], "{") {
				ok = false
				break
			}
		}
		if ok {
			return tmpl
		}
	}
	return path
}

// Paths that are spelled differently but could reach an /api/v1 handler never get past the
// token check: nothing that is not an operations route answers 2xx without a token.
func TestAuthPathSpellingsDoNotBypassTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens(authTokenA))
	e.Token = authTokenA
	e.PutDag("auth_dag", "@daily", "")
	b := e.CreateBackfill(backfillBody("auth_dag", day(1, 1), day(1, 3)))
	backfill := "/api/v1/backfills/" + strconv.FormatInt(b.Id, 10)

	paths := []string{
		"/api/v1", "/api/v1/", "/api/v1/dags/", "/api//v1/dags", "/api/v1//dags", "//api/v1/dags",
		"/api/v1/./dags", "/api/v1/dags/../dags", "/api/v1/%64ags", "/%61pi/v1/dags", "/API/v1/dags",
		"/api/V1/dags", "/api/v1/dags%2Fauth_dag", backfill + "?x=/healthz", "/healthz/../api/v1/dags",
		"/api/v1/dags;/healthz", backfill + "/pause/", "/api/v1/dags/auth_dag#x",
	}
	for _, p := range paths {
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodPost} {
			req, err := http.NewRequestWithContext(context.Background(), method, e.URL+p, strings.NewReader(`{"schedule":"@daily"}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			res, err := e.HTTP.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.False(t, res.StatusCode < 300, "%s %s answered %d without a token: %s", method, p, res.StatusCode, body)
			require.Less(t, res.StatusCode, 500, "%s %s: %s", method, p, body)
		}
	}
	// Nothing was paused or created by any of them.
	require.Equal(t, "running", string(e.GetBackfill(b.Id).State))
}

// The spec declares the bearer scheme, requires it by default, and lifts it only on the
// operations routes; every /api/v1 operation documents its 401.
func TestAuthSpecDeclaresBearerScheme(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	require.NoError(t, err)
	ref := doc.Components.SecuritySchemes["bearerAuth"]
	require.NotNil(t, ref, "components.securitySchemes.bearerAuth")
	require.Equal(t, "http", ref.Value.Type)
	require.Equal(t, "bearer", strings.ToLower(ref.Value.Scheme))
	require.Len(t, doc.Security, 1)
	_, ok := doc.Security[0]["bearerAuth"]
	require.True(t, ok, "the top-level security requires bearerAuth")
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if strings.HasPrefix(path, "/api/v1/") {
				require.True(t, op.Security == nil || (len(*op.Security) > 0), "%s %s must not lift security", method, path)
				require.NotNil(t, op.Responses.Value("401"), "%s %s documents 401", method, path)
				continue
			}
			require.NotNil(t, op.Security, "%s %s is an operations route: security: []", method, path)
			require.Empty(t, *op.Security, "%s %s is an operations route: security: []", method, path)
		}
	}
}

package airflowfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a test whose Errorf is recorded instead of failing it, to see the fake fail a
// test that sent a forbidden field.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func call(t *testing.T, f *Fake, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, f.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// The fake answers as Airflow's FastAPI server does: 422 extra_forbidden (and a failed test)
// for a field TriggerDAGRunPostBody does not name, 422 for a missing or mistyped one, 409 for
// a dag_run_id that exists, 401, 403 and 404 as HTTPExceptionResponse.
func TestAirflowFakeHoldsRequestsToTheSchemas(t *testing.T) {
	rec := &recorder{T: t}
	f := New(rec, "tok")
	f.AddDAG(DAG{DagID: "sales", Timezone: "UTC"})
	f.AddDAG(DAG{DagID: "secret", Timezone: "UTC", Forbidden: true})
	const runs = "/api/v2/dags/sales/dagRuns"
	ok := `{"dag_run_id":"r1","logical_date":"2024-05-01T00:00:00Z","conf":{"a":1}}`

	status, body := call(t, f, "POST", runs, "tok", `{"dag_run_id":"r0","logical_date":"2024-05-01T00:00:00Z","execution_date":"2024-05-01T00:00:00Z"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, map[string]any{"detail": []any{map[string]any{
		"type": "extra_forbidden", "loc": []any{"body", "execution_date"}, "msg": "Extra inputs are not permitted", "input": "2024-05-01T00:00:00Z",
	}}}, body)
	require.Len(t, rec.errs, 1, "a forbidden field fails the test")
	require.Contains(t, rec.errs[0], `"execution_date"`)

	status, body = call(t, f, "POST", runs, "tok", `{"dag_run_id":"r0"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "missing", body["detail"].([]any)[0].(map[string]any)["type"])
	status, _ = call(t, f, "POST", runs, "tok", `{"logical_date":"2024-05-01T00:00:00Z","conf":[1]}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, "conf is an object or null")

	status, body = call(t, f, "POST", runs, "tok", ok)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "queued", body["state"])
	require.Equal(t, map[string]any{"a": float64(1)}, body["conf"])
	status, body = call(t, f, "POST", runs, "tok", ok)
	require.Equal(t, http.StatusConflict, status)
	require.IsType(t, "", body["detail"])
	require.Equal(t, map[string]int{"sales/r1": 1}, f.Triggers())
	require.Equal(t, map[string]int{"sales/r1": 1}, f.Conflicts())

	status, _ = call(t, f, "PATCH", runs+"/r1", "tok", `{"state":"running"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, "DAGRunPatchStates has no running")
	status, body = call(t, f, "PATCH", runs+"/r1", "tok", `{"state":"failed"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "failed", body["state"])

	status, body = call(t, f, "GET", runs+"/r1", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
	require.IsType(t, "", body["detail"])
	status, _ = call(t, f, "GET", "/api/v2/dags/secret/dagRuns/r1", "tok", "")
	require.Equal(t, http.StatusForbidden, status)
	status, _ = call(t, f, "GET", runs+"/nope", "tok", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Len(t, rec.errs, 1, "only the forbidden field failed the test")
}

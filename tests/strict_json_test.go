package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStrictJSONRefusesDuplicateKeysAndDeepNesting sends bodies that encoding/json would take
// silently (the last of two keys wins; any depth goes) and checks that each is 400
// invalid_request naming the place, and that nothing was created.
func TestStrictJSONRefusesDuplicateKeysAndDeepNesting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	e.PutDag("b", "@daily", "")
	window := `"from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-03T00:00:00Z"`
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		name, path, body, field string
	}{
		{"duplicate top-level key", "/api/v1/backfills", `{"dag_id":"a","dag_id":"b",` + window + `}`, "dag_id"},
		{"duplicate whose last value breaks the schema", "/api/v1/backfills", `{"dag_id":"a","dag_id":7,` + window + `}`, "dag_id"},
		{"duplicate in conf", "/api/v1/backfills", `{"dag_id":"a",` + window + `,"dag_run_conf":{"x":{"k":1,"k":2}}}`, "dag_run_conf.x.k"},
		{"duplicate in an array's object", "/api/v1/backfills", `{"dag_id":"a",` + window + `,"dag_run_conf":{"l":[1,{"k":1,"k":1}]}}`, "dag_run_conf.l.1.k"},
		{"65 levels", "/api/v1/backfills", `{"dag_id":"a",` + window + `,"dag_run_conf":{"d":` + deep(64) + `}}`, "dag_run_conf.d" + strings.Repeat(".0", 62)},
		{"10,000 levels", "/api/v1/backfills", `{"dag_id":"a",` + window + `,"dag_run_conf":{"d":` + deep(10000) + `}}`, "dag_run_conf.d" + strings.Repeat(".0", 62)},
	}
	for _, c := range cases {
		res := e.Do("POST", c.path, c.body)
		p := requireProblem(t, res, http.StatusBadRequest, "invalid_request", c.name)
		require.Equal(t, c.field, (*p.Errors)[0].Field, c.name)
	}
	// 64 levels (the body's own object and 63 more) pass.
	ok := e.Do("POST", "/api/v1/backfills", `{"dag_id":"a",`+window+`,"dag_run_conf":{"d":`+deep(62)+`}}`)
	require.Equal(t, http.StatusCreated, ok.Status, "body: %s", ok.Body)
	list := e.Do("GET", "/api/v1/backfills?dag_id=b", nil)
	require.NotContains(t, string(list.Body), `"dag_id":"b"`)
}

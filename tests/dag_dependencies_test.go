package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func up(dagID string, extra ...any) map[string]any {
	return fields(map[string]any{"dag_id": dagID}, extra...)
}

// A DAG names its upstreams with a mapping and a lookback (defaults filled in from the spec)
// and may depend on its past; GET answers them in the order given, with the DAGs downstream
// of it by dag_id, and a PUT that leaves them out replaces them with none.
func TestDagUpstreamsAndDownstreamsAreAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("raw_hourly", "@hourly", "")
	e.PutDag("dim", "@daily", "")
	d := e.PutDagWith("rollup_daily", "@daily", "depends_on_past", true,
		"upstreams", []any{up("raw_hourly"), up("dim", "mapping", "all", "lookback", 6)})
	require.True(t, d.DependsOnPast)
	require.Equal(t, []api.DagUpstream{
		{DagId: "raw_hourly", Mapping: api.DependencyMappingOverlap, Lookback: 0},
		{DagId: "dim", Mapping: api.DependencyMappingAll, Lookback: 6},
	}, d.Upstreams)
	require.Empty(t, d.Downstreams)
	e.PutDagWith("report", "@daily", "upstreams", []any{up("rollup_daily")})

	var got api.Dag
	e.Do(http.MethodGet, "/api/v1/dags/rollup_daily", nil).Decode(t, &got)
	require.Equal(t, d.Upstreams, got.Upstreams)
	require.Equal(t, []string{"report"}, got.Downstreams)
	e.Do(http.MethodGet, "/api/v1/dags/raw_hourly", nil).Decode(t, &got)
	require.Empty(t, got.Upstreams)
	require.Equal(t, []string{"rollup_daily"}, got.Downstreams)
	require.False(t, got.DependsOnPast)

	var page api.DagCollection
	e.Do(http.MethodGet, "/api/v1/dags?limit=10", nil).Decode(t, &page)
	byID := map[string]api.Dag{}
	for _, d := range page.Dags {
		byID[d.DagId] = d
	}
	require.Equal(t, []string{"rollup_daily", "report"}[:1], byID["dim"].Downstreams)
	require.Len(t, byID["rollup_daily"].Upstreams, 2)

	// A PUT replaces the DAG whole: without upstreams it has none.
	d = e.PutDagWith("rollup_daily", "@daily")
	require.Empty(t, d.Upstreams)
	require.False(t, d.DependsOnPast)
	e.Do(http.MethodGet, "/api/v1/dags/raw_hourly", nil).Decode(t, &got)
	require.Empty(t, got.Downstreams)
}

// An unknown upstream is 422 dag_not_found naming it; a DAG listed twice is invalid_dag;
// an out-of-range lookback or mapping is a 400; nothing is written by any of them.
func TestDagUpstreamsThatCannotBeRefusedWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	before := e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})

	res := e.Do(http.MethodPut, "/api/v1/dags/b", map[string]any{"schedule": "@hourly",
		"upstreams": []any{up("a"), up("nope")}})
	p := requireProblem(t, res, http.StatusUnprocessableEntity, "dag_not_found")
	require.Contains(t, p.Detail, `"nope"`)
	res = e.Do(http.MethodPut, "/api/v1/dags/b", map[string]any{"schedule": "@daily",
		"upstreams": []any{up("a"), up("a", "mapping", "all")}})
	requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_dag")
	res = e.Do(http.MethodPut, "/api/v1/dags/b", map[string]any{"schedule": "@daily",
		"upstreams": []any{up("a", "lookback", 1001)}})
	requireProblem(t, res, http.StatusBadRequest, "invalid_request")
	res = e.Do(http.MethodPut, "/api/v1/dags/b", map[string]any{"schedule": "@daily",
		"upstreams": []any{up("a", "mapping", "some")}})
	requireProblem(t, res, http.StatusBadRequest, "invalid_request")
	many := make([]any, 51)
	for i := range many {
		many[i] = up(fmt.Sprint("u", i))
	}
	res = e.Do(http.MethodPut, "/api/v1/dags/b", map[string]any{"schedule": "@daily", "upstreams": many})
	requireProblem(t, res, http.StatusBadRequest, "invalid_request")

	var after api.Dag
	e.Do(http.MethodGet, "/api/v1/dags/b", nil).Decode(t, &after)
	require.Equal(t, before, after, "a refused PUT changed nothing, not even the schedule")
}

// Upstreams that would close a cycle are 422 dependency_cycle naming the cycle, each DAG
// depending on the next: a DAG on itself, and a longer loop through existing edges.
func TestDagDependencyCyclesAreRefusedNamingThePath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodPut, "/api/v1/dags/self", map[string]any{"schedule": "@daily",
		"upstreams": []any{up("self")}})
	p := requireProblem(t, res, http.StatusUnprocessableEntity, "dependency_cycle")
	require.Equal(t, []string{"self", "self"}, *p.Cycle)
	requireProblem(t, e.Do(http.MethodGet, "/api/v1/dags/self", nil), http.StatusNotFound, "dag_not_found")

	// a ← b ← c ← d, and a diamond beside: x ← {b, y}.
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	e.PutDagWith("c", "@daily", "upstreams", []any{up("b")})
	e.PutDagWith("d", "@daily", "upstreams", []any{up("c")})
	e.PutDag("y", "@daily", "")
	e.PutDagWith("x", "@daily", "upstreams", []any{up("b"), up("y")})
	res = e.Do(http.MethodPut, "/api/v1/dags/a", map[string]any{"schedule": "@daily",
		"upstreams": []any{up("y"), up("d")}})
	p = requireProblem(t, res, http.StatusUnprocessableEntity, "dependency_cycle")
	require.Equal(t, []string{"a", "d", "c", "b", "a"}, *p.Cycle)
	require.Contains(t, p.Detail, "a → d → c → b → a")
	var a api.Dag
	e.Do(http.MethodGet, "/api/v1/dags/a", nil).Decode(t, &a)
	require.Empty(t, a.Upstreams, "the refused definition wrote no edge")

	// Replacing a DAG's own edges is no cycle: c may name a instead of b.
	e.PutDagWith("c", "@daily", "upstreams", []any{up("a")})
	// Now b may depend on d (d → c → a, no path back to b).
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a"), up("d")})
}

// Two definitions that would close a cycle together, sent at once round after round: one
// is written and the other refused, and the graph never holds a cycle.
func TestConcurrentDefinitionsNeverCloseACycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for round := range raceRoundsFor(t, 30) {
		a, b, c := fmt.Sprint("a", round), fmt.Sprint("b", round), fmt.Sprint("c", round)
		for _, id := range []string{a, b, c} {
			e.PutDag(id, "@daily", "")
		}
		// a ← b ← c exists in two halves sent together: b names a, and a names c while c names b.
		e.PutDagWith(b, "@daily", "upstreams", []any{up(a)})
		res := e.DoTogether(
			request{Method: http.MethodPut, Path: "/api/v1/dags/" + c, Body: map[string]any{"schedule": "@daily", "upstreams": []any{up(b)}}},
			request{Method: http.MethodPut, Path: "/api/v1/dags/" + a, Body: map[string]any{"schedule": "@daily", "upstreams": []any{up(c)}}},
		)
		statuses := tally(res)
		require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusUnprocessableEntity: 1}, statuses, "round %d", round)
		var cycles int
		require.NoError(t, e.DB.Get(&cycles, `
			WITH RECURSIVE walk (start, dag_id, depth) AS (
				SELECT dag_id, upstream_dag_id, 1 FROM dag_dependencies
				UNION ALL
				SELECT w.start, e.upstream_dag_id, w.depth + 1 FROM walk w
				JOIN dag_dependencies e ON e.dag_id = w.dag_id WHERE w.depth < 10)
			SELECT count(*) FROM walk WHERE start = dag_id`))
		require.Zero(t, cycles, "round %d: the graph holds a cycle", round)
	}
}

// A DAG that others name cannot be deleted: 409 dag_has_downstreams naming them. Once they
// stop naming it, it can; a downstream's delete takes its own edges with it.
func TestDeletingADagOthersDependOnIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("src", "@daily", "")
	e.PutDagWith("mid", "@daily", "upstreams", []any{up("src")})
	e.PutDagWith("sink", "@daily", "upstreams", []any{up("src"), up("mid")})
	res := e.Do(http.MethodDelete, "/api/v1/dags/src", nil)
	p := requireProblem(t, res, http.StatusConflict, "dag_has_downstreams")
	require.Equal(t, []string{"mid", "sink"}, *p.Downstreams)

	require.Equal(t, http.StatusNoContent, e.Do(http.MethodDelete, "/api/v1/dags/sink", nil).Status)
	var src api.Dag
	e.Do(http.MethodGet, "/api/v1/dags/src", nil).Decode(t, &src)
	require.Equal(t, []string{"mid"}, src.Downstreams)
	e.PutDagWith("mid", "@daily")
	require.Equal(t, http.StatusNoContent, e.Do(http.MethodDelete, "/api/v1/dags/src", nil).Status)
}

// A delete and a definition naming the DAG, sent at once: either the definition comes first
// and the delete is 409, or the delete comes first and the definition is 422 dag_not_found;
// never an edge to a DAG that is gone.
func TestDeleteRacingADefinitionThatNamesTheDag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seen := map[string]int{}
	for round := range raceRoundsFor(t, 30) {
		src, dst := fmt.Sprint("src", round), fmt.Sprint("dst", round)
		e.PutDag(src, "@daily", "")
		e.PutDag(dst, "@daily", "")
		res := e.DoTogether(
			request{Method: http.MethodDelete, Path: "/api/v1/dags/" + src},
			request{Method: http.MethodPut, Path: "/api/v1/dags/" + dst, Body: map[string]any{"schedule": "@daily", "upstreams": []any{up(src)}}},
		)
		outcome := fmt.Sprint(res[0].Status, "/", res[1].Status)
		seen[outcome]++
		switch outcome {
		case "409/200":
			requireProblem(t, res[0], http.StatusConflict, "dag_has_downstreams")
		case "204/422":
			requireProblem(t, res[1], http.StatusUnprocessableEntity, "dag_not_found")
		default:
			t.Fatalf("round %d: delete and definition answered %s: %s / %s", round, outcome, res[0].Body, res[1].Body)
		}
		var dangling int
		require.NoError(t, e.DB.Get(&dangling, `SELECT count(*) FROM dag_dependencies e
			WHERE NOT EXISTS (SELECT 1 FROM dags d WHERE d.dag_id = e.upstream_dag_id)`))
		require.Zero(t, dangling)
	}
	t.Logf("outcomes: %v", seen)
}

// backfillctl dags put --upstream and --depends-on-past, as a user types them; a cycle and
// a delete of a DAG others name are refused with their codes (exit 3).
func TestDagDependenciesCLI(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	okCLI(t, bin, e, "dags", "put", "raw", "--schedule", "@hourly")
	okCLI(t, bin, e, "dags", "put", "dim", "--schedule", "@daily")
	okCLI(t, bin, e, "dags", "put", "rollup", "--schedule", "@daily", "--upstream", "raw",
		"--upstream", "dim:all:6", "--depends-on-past")
	table := okCLI(t, bin, e, "dags", "get", "rollup")
	require.Regexp(t, `(?m)^DAG_ID\s+SCHEDULE\s+TIMEZONE\s+MAX_ACTIVE_RUNS\s+PAUSED\s+UPSTREAMS\s+DESCRIPTION$`, table)
	require.Regexp(t, `(?m)^rollup\s+@daily\s+UTC\s+16\s+false\s+raw,dim:all:6\s+-$`, table)
	var d api.Dag
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "dags", "get", "raw", "-o", "json")), &d))
	require.Equal(t, []string{"rollup"}, d.Downstreams)

	r := runCLI(t, bin, e, "dags", "put", "raw", "--schedule", "@hourly", "--upstream", "rollup")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "dependency_cycle")
	require.Contains(t, r.stderr, "raw → rollup → raw")
	r = runCLI(t, bin, e, "dags", "delete", "dim")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "dag_has_downstreams")
	r = runCLI(t, bin, e, "dags", "put", "x", "--schedule", "@daily", "--upstream", "raw:some")
	require.Equal(t, 3, r.code, "a mapping the flag does not know is a usage error")
}

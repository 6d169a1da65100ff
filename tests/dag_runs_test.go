package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func TestDagRunCreateManualRunQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("man", "@daily", "")

	// A logical date with an offset is the same instant; the run is named and answered in UTC.
	res := e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": "2024-01-01T01:00:00+01:00"})
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var r api.DagRun
	res.Decode(t, &r)
	require.Equal(t, "manual__2024-01-01T00:00:00Z", r.RunId)
	require.Equal(t, runPath("man", r.RunId), res.Header.Get("Location"))
	require.Positive(t, r.Id)
	require.Equal(t, "man", r.DagId)
	require.Equal(t, day(1, 1), r.LogicalDate)
	require.Equal(t, day(1, 1), r.DataIntervalStart)
	require.Equal(t, day(1, 2), r.DataIntervalEnd)
	require.Equal(t, api.DagRunState("queued"), r.State)
	require.Equal(t, api.RunType("manual"), r.RunType)
	require.Nil(t, r.BackfillId)
	require.Nil(t, r.Conf)
	require.Contains(t, string(res.Body), `"conf":null`)
	require.EqualValues(t, 1, r.Attempt)
	require.Nil(t, r.WorkerId)
	require.NotNil(t, r.QueuedAt)
	require.Equal(t, e.Clock.Now(), *r.QueuedAt)
	require.Nil(t, r.StartDate)
	require.Nil(t, r.EndDate)
	require.Nil(t, r.LeaseExpiresAt)

	// The Location answers the same run.
	got := call[api.DagRun](e, http.StatusOK, http.MethodGet, res.Header.Get("Location"), nil)
	require.Equal(t, r, got)

	// With conf.
	withConf := e.CreateManualRun("man", day(1, 2), map[string]any{"source": "manual-rerun", "n": float64(2)})
	requireConf(t, map[string]any{"source": "manual-rerun", "n": 2}, withConf.Conf)
	require.Equal(t, withConf, e.GetRun("man", "manual__2024-01-02T00:00:00Z"))
}

func TestDagRunCreateSameLogicalDateIs409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("man", "@daily", "")
	first := e.CreateManualRun("man", day(1, 1), nil)
	before := e.TableCounts()
	for _, date := range []string{"2024-01-01T00:00:00Z", "2024-01-01T02:00:00+02:00"} {
		res := e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": date, "conf": map[string]any{"x": 1}})
		requireProblem(t, res, http.StatusConflict, "run_already_exists")
	}
	require.Equal(t, before, e.TableCounts())
	// A backfill's run for a date blocks a manual run for it too, whatever its state.
	e.MarkRun("man", first.RunId, "success")
	e.CreateBackfill(backfillBody("man", day(1, 2), day(1, 2)))
	before = e.TableCounts()
	res := e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": ts(day(1, 2))})
	requireProblem(t, res, http.StatusConflict, "run_already_exists")
	res = e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": ts(day(1, 1))})
	requireProblem(t, res, http.StatusConflict, "run_already_exists")
	require.Equal(t, before, e.TableCounts())
}

func TestDagRunUnknownDagOrRunIs404(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodPost, "/api/v1/dags/ghost/runs", map[string]any{"logical_date": ts(day(1, 1))})
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")
	res = e.Do(http.MethodGet, "/api/v1/dags/ghost/runs", nil)
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")
	res = e.Do(http.MethodGet, runPath("ghost", "manual__2024-01-01T00:00:00Z"), nil)
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")
	res = e.Do(http.MethodPatch, runPath("ghost", "manual__2024-01-01T00:00:00Z"), map[string]any{"state": "success"})
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")

	e.PutDag("real", "@daily", "")
	res = e.Do(http.MethodGet, runPath("real", "manual__2024-01-01T00:00:00Z"), nil)
	requireProblem(t, res, http.StatusNotFound, "run_not_found")
	res = e.Do(http.MethodPatch, runPath("real", "manual__2024-01-01T00:00:00Z"), map[string]any{"state": "success"})
	requireProblem(t, res, http.StatusNotFound, "run_not_found")
	require.Equal(t, 0, e.TableCounts()["dag_runs"])
}

func TestDagRunListFiltersAndOrdersByLogicalDate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("lst", "@daily", "")
	e.PutDag("other", "@daily", "")
	// Created out of order on purpose.
	e.CreateManualRun("lst", day(1, 3), nil)
	e.CreateManualRun("lst", day(1, 1), nil)
	r5 := e.CreateManualRun("lst", day(1, 5), nil)
	e.MarkRun("lst", r5.RunId, "success")
	e.CreateManualRun("other", day(1, 1), nil)
	// Slots 2 and 4 get new runs; 1 and 3 are in flight, 5 already exists.
	b := e.CreateBackfill(backfillBody("lst", day(1, 1), day(1, 5)))
	require.Equal(t, api.BackfillProgress{Total: 5, Queued: 2, Skipped: 3}, b.Progress)

	dates := func(c api.DagRunCollection) []time.Time {
		out := make([]time.Time, 0, len(c.DagRuns))
		for _, r := range c.DagRuns {
			out = append(out, r.LogicalDate)
			require.Equal(t, "lst", r.DagId)
		}
		return out
	}
	all := e.ListRuns("lst", "")
	require.EqualValues(t, 5, all.TotalEntries)
	require.Equal(t, days(1, 5), dates(all))

	queued := e.ListRuns("lst", "?state=queued")
	require.EqualValues(t, 4, queued.TotalEntries)
	require.Equal(t, []time.Time{day(1, 1), day(1, 2), day(1, 3), day(1, 4)}, dates(queued))

	success := e.ListRuns("lst", "?state=success")
	require.EqualValues(t, 1, success.TotalEntries)
	require.Equal(t, []time.Time{day(1, 5)}, dates(success))

	owned := e.ListRuns("lst", fmt.Sprintf("?backfill_id=%d", b.Id))
	require.EqualValues(t, 2, owned.TotalEntries)
	require.Equal(t, []time.Time{day(1, 2), day(1, 4)}, dates(owned))
	for _, r := range owned.DagRuns {
		require.Equal(t, api.RunType("backfill"), r.RunType)
	}

	both := e.ListRuns("lst", fmt.Sprintf("?backfill_id=%d&state=success", b.Id))
	require.EqualValues(t, 0, both.TotalEntries)
	require.NotNil(t, both.DagRuns)

	page := e.ListRuns("lst", "?limit=2&offset=1")
	require.EqualValues(t, 5, page.TotalEntries)
	require.Equal(t, []time.Time{day(1, 2), day(1, 3)}, dates(page))

	none := e.ListRuns("lst", fmt.Sprintf("?backfill_id=%d", b.Id+1000))
	require.EqualValues(t, 0, none.TotalEntries)
	require.Empty(t, none.DagRuns)
}

func TestDagRunPatchQueuedToTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pt", "@daily", "")
	for i, state := range []string{"success", "failed", "canceled"} {
		r := e.CreateManualRun("pt", day(1, i+1), nil)
		e.Clock.Advance(time.Minute)
		out := e.MarkRun("pt", r.RunId, state)
		require.Equal(t, api.DagRunState(state), out.State)
		require.NotNil(t, out.EndDate)
		require.Equal(t, e.Clock.Now(), *out.EndDate)
		require.Equal(t, r.Id, out.Id)
		require.Equal(t, r.RunId, out.RunId)
		require.Equal(t, out, e.GetRun("pt", r.RunId))
	}
}

func TestDagRunPatchToRunningOrFromTerminalIsInvalidTransition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pt", "@daily", "")
	r := e.CreateManualRun("pt", day(1, 1), nil)

	// Only a claim starts a run.
	res := e.Do(http.MethodPatch, runPath("pt", r.RunId), map[string]any{"state": "running"})
	requireProblem(t, res, http.StatusConflict, "invalid_transition")
	// queued → queued is not a transition either.
	res = e.Do(http.MethodPatch, runPath("pt", r.RunId), map[string]any{"state": "queued"})
	requireProblem(t, res, http.StatusConflict, "invalid_transition")
	require.Equal(t, r, e.GetRun("pt", r.RunId), "a refused PATCH changes nothing")

	done := e.MarkRun("pt", r.RunId, "success")
	for _, state := range []string{"success", "failed", "canceled", "running", "queued"} {
		res = e.Do(http.MethodPatch, runPath("pt", r.RunId), map[string]any{"state": state})
		requireProblem(t, res, http.StatusConflict, "invalid_transition")
	}
	require.Equal(t, done, e.GetRun("pt", r.RunId))

	// A running run can be reported by its worker, and then no more.
	e.CreateManualRun("pt", day(1, 2), nil)
	claimed := e.ClaimN(1, "w1", 1)
	res = e.Do(http.MethodPatch, runPath("pt", claimed[0].RunId), map[string]any{"state": "running", "worker_id": "w1"})
	requireProblem(t, res, http.StatusConflict, "invalid_transition")
	out := e.Report(claimed[0], "failed")
	require.Equal(t, api.DagRunState("failed"), out.State)
	res = e.Do(http.MethodPatch, runPath("pt", claimed[0].RunId), map[string]any{"state": "success", "worker_id": "w1"})
	require.Equal(t, http.StatusConflict, res.Status, "body: %s", res.Body)
	res = e.Do(http.MethodPatch, runPath("pt", claimed[0].RunId), map[string]any{"state": "success"})
	requireProblem(t, res, http.StatusConflict, "invalid_transition")
}

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
	require.Equal(t, c2RunPath("man", r.RunId), res.Header.Get("Location"))
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
	res = e.Do(http.MethodGet, res.Header.Get("Location"), nil)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var got api.DagRun
	res.Decode(t, &got)
	require.Equal(t, r, got)

	// With conf.
	withConf := c2CreateRun(t, e, "man", day(1, 2), map[string]any{"source": "manual-rerun", "n": float64(2)})
	requireConf(t, map[string]any{"source": "manual-rerun", "n": 2}, withConf.Conf)
	require.Equal(t, withConf, c2GetRun(t, e, "man", "manual__2024-01-02T00:00:00Z"))
}

func TestDagRunCreateSameLogicalDateIs409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("man", "@daily", "")
	first := c2CreateRun(t, e, "man", day(1, 1), nil)
	before := c2Counts(t, e)
	for _, date := range []string{"2024-01-01T00:00:00Z", "2024-01-01T02:00:00+02:00"} {
		res := e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": date, "conf": map[string]any{"x": 1}})
		c2RequireProblem(t, res, http.StatusConflict, "run_already_exists")
	}
	require.Equal(t, before, c2Counts(t, e))
	// A backfill's run for a date blocks a manual run for it too, whatever its state.
	c2Mark(t, e, "man", first.RunId, "success")
	e.CreateBackfill(backfillBody("man", day(1, 2), day(1, 2)))
	before = c2Counts(t, e)
	res := e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": ts(day(1, 2))})
	c2RequireProblem(t, res, http.StatusConflict, "run_already_exists")
	res = e.Do(http.MethodPost, "/api/v1/dags/man/runs", map[string]any{"logical_date": ts(day(1, 1))})
	c2RequireProblem(t, res, http.StatusConflict, "run_already_exists")
	require.Equal(t, before, c2Counts(t, e))
}

func TestDagRunUnknownDagOrRunIs404(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodPost, "/api/v1/dags/ghost/runs", map[string]any{"logical_date": ts(day(1, 1))})
	c2RequireProblem(t, res, http.StatusNotFound, "dag_not_found")
	res = e.Do(http.MethodGet, "/api/v1/dags/ghost/runs", nil)
	c2RequireProblem(t, res, http.StatusNotFound, "dag_not_found")
	res = e.Do(http.MethodGet, c2RunPath("ghost", "manual__2024-01-01T00:00:00Z"), nil)
	c2RequireProblem(t, res, http.StatusNotFound, "dag_not_found")
	res = e.Do(http.MethodPatch, c2RunPath("ghost", "manual__2024-01-01T00:00:00Z"), map[string]any{"state": "success"})
	c2RequireProblem(t, res, http.StatusNotFound, "dag_not_found")

	e.PutDag("real", "@daily", "")
	res = e.Do(http.MethodGet, c2RunPath("real", "manual__2024-01-01T00:00:00Z"), nil)
	c2RequireProblem(t, res, http.StatusNotFound, "run_not_found")
	res = e.Do(http.MethodPatch, c2RunPath("real", "manual__2024-01-01T00:00:00Z"), map[string]any{"state": "success"})
	c2RequireProblem(t, res, http.StatusNotFound, "run_not_found")
	require.Equal(t, 0, c2Counts(t, e)["dag_runs"])
}

func TestDagRunListFiltersAndOrdersByLogicalDate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("lst", "@daily", "")
	e.PutDag("other", "@daily", "")
	// Created out of order on purpose.
	c2CreateRun(t, e, "lst", day(1, 3), nil)
	c2CreateRun(t, e, "lst", day(1, 1), nil)
	r5 := c2CreateRun(t, e, "lst", day(1, 5), nil)
	c2Mark(t, e, "lst", r5.RunId, "success")
	c2CreateRun(t, e, "other", day(1, 1), nil)
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
	all := c2ListRuns(t, e, "lst", "")
	require.EqualValues(t, 5, all.TotalEntries)
	require.Equal(t, c2Days(1, 5), dates(all))

	queued := c2ListRuns(t, e, "lst", "?state=queued")
	require.EqualValues(t, 4, queued.TotalEntries)
	require.Equal(t, []time.Time{day(1, 1), day(1, 2), day(1, 3), day(1, 4)}, dates(queued))

	success := c2ListRuns(t, e, "lst", "?state=success")
	require.EqualValues(t, 1, success.TotalEntries)
	require.Equal(t, []time.Time{day(1, 5)}, dates(success))

	owned := c2ListRuns(t, e, "lst", fmt.Sprintf("?backfill_id=%d", b.Id))
	require.EqualValues(t, 2, owned.TotalEntries)
	require.Equal(t, []time.Time{day(1, 2), day(1, 4)}, dates(owned))
	for _, r := range owned.DagRuns {
		require.Equal(t, api.RunType("backfill"), r.RunType)
	}

	both := c2ListRuns(t, e, "lst", fmt.Sprintf("?backfill_id=%d&state=success", b.Id))
	require.EqualValues(t, 0, both.TotalEntries)
	require.NotNil(t, both.DagRuns)

	page := c2ListRuns(t, e, "lst", "?limit=2&offset=1")
	require.EqualValues(t, 5, page.TotalEntries)
	require.Equal(t, []time.Time{day(1, 2), day(1, 3)}, dates(page))

	none := c2ListRuns(t, e, "lst", fmt.Sprintf("?backfill_id=%d", b.Id+1000))
	require.EqualValues(t, 0, none.TotalEntries)
	require.Empty(t, none.DagRuns)
}

func TestDagRunPatchQueuedToTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pt", "@daily", "")
	for i, state := range []string{"success", "failed", "canceled"} {
		r := c2CreateRun(t, e, "pt", day(1, i+1), nil)
		e.Clock.Advance(time.Minute)
		out := c2Mark(t, e, "pt", r.RunId, state)
		require.Equal(t, api.DagRunState(state), out.State)
		require.NotNil(t, out.EndDate)
		require.Equal(t, e.Clock.Now(), *out.EndDate)
		require.Equal(t, r.Id, out.Id)
		require.Equal(t, r.RunId, out.RunId)
		require.Equal(t, out, c2GetRun(t, e, "pt", r.RunId))
	}
}

func TestDagRunPatchToRunningOrFromTerminalIsInvalidTransition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pt", "@daily", "")
	r := c2CreateRun(t, e, "pt", day(1, 1), nil)

	// Only a claim starts a run.
	res := e.Do(http.MethodPatch, c2RunPath("pt", r.RunId), map[string]any{"state": "running"})
	c2RequireProblem(t, res, http.StatusConflict, "invalid_transition")
	// queued → queued is not a transition either.
	res = e.Do(http.MethodPatch, c2RunPath("pt", r.RunId), map[string]any{"state": "queued"})
	c2RequireProblem(t, res, http.StatusConflict, "invalid_transition")
	require.Equal(t, r, c2GetRun(t, e, "pt", r.RunId), "a refused PATCH changes nothing")

	done := c2Mark(t, e, "pt", r.RunId, "success")
	for _, state := range []string{"success", "failed", "canceled", "running", "queued"} {
		res = e.Do(http.MethodPatch, c2RunPath("pt", r.RunId), map[string]any{"state": state})
		c2RequireProblem(t, res, http.StatusConflict, "invalid_transition")
	}
	require.Equal(t, done, c2GetRun(t, e, "pt", r.RunId))

	// A running run can be reported by its worker, and then no more.
	c2CreateRun(t, e, "pt", day(1, 2), nil)
	claimed := e.Claim("w1", 1)
	require.Len(t, claimed, 1)
	res = e.Do(http.MethodPatch, c2RunPath("pt", claimed[0].RunId), map[string]any{"state": "running", "worker_id": "w1"})
	c2RequireProblem(t, res, http.StatusConflict, "invalid_transition")
	out := e.Report(claimed[0], "failed")
	require.Equal(t, api.DagRunState("failed"), out.State)
	res = e.Do(http.MethodPatch, c2RunPath("pt", claimed[0].RunId), map[string]any{"state": "success", "worker_id": "w1"})
	require.Equal(t, http.StatusConflict, res.Status, "body: %s", res.Body)
	res = e.Do(http.MethodPatch, c2RunPath("pt", claimed[0].RunId), map[string]any{"state": "success"})
	c2RequireProblem(t, res, http.StatusConflict, "invalid_transition")
}

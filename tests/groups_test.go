package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// diamond defines a → b, a → c, b + c → sink, all daily.
func (e *env) diamond() {
	e.t.Helper()
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	e.PutDagWith("c", "@daily", "upstreams", []any{up("a")})
	e.PutDagWith("sink", "@daily", "upstreams", []any{up("b"), up("c")})
}

// DolphinScheduler#17540 ran a diamond's sink twice. Here 8 workers claim a diamond's runs
// concurrently: every run is handed out once, each only after every run it waits for
// succeeded, and the group succeeds with its members.
func TestGroupDiamondRunsEachSlotOnceInOrder_DolphinScheduler17540(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.diamond()
	g := e.CreateGroup([]string{"a"}, day(1, 1), day(1, 6), "include_downstream", "all")
	require.Len(t, g.Members, 4)
	depth := map[string]int32{}
	for _, m := range g.Members {
		depth[m.DagId] = m.Depth
		require.Equal(t, int64(6), m.Progress.Total, m.DagId)
	}
	require.Equal(t, map[string]int32{"a": 0, "b": 1, "c": 1, "sink": 2}, depth)
	require.Equal(t, int64(4*6), g.Dependencies, "b and c wait for a, the sink for b and c, day by day")
	require.Equal(t, int64(18), g.Progress.Blocked)
	require.Equal(t, int64(24), g.Progress.Queued)

	runs := e.workUntilIdle(8, nil)
	require.Len(t, runs, 24, "every run once")
	seen := map[string]int{}
	claimedAt := map[string]int{}
	for _, c := range runs {
		key := c.run.DagId + "/" + c.run.RunId
		seen[key]++
		claimedAt[key] = c.seq
		require.Equal(t, int32(1), c.run.Attempt, key)
	}
	for key, n := range seen {
		require.Equal(t, 1, n, "%s was handed out %d times", key, n)
	}
	for _, c := range runs {
		var ups []string
		switch c.run.DagId {
		case "b", "c":
			ups = []string{"a"}
		case "sink":
			ups = []string{"b", "c"}
		}
		for _, u := range ups {
			upKey := u + "/" + c.run.RunId
			require.Less(t, claimedAt[upKey], c.seq, "%s/%s was claimed before %s", c.run.DagId, c.run.RunId, upKey)
			upRun := e.GetRun(u, c.run.RunId)
			require.Equal(t, api.DagRunStateSuccess, upRun.State)
			require.False(t, upRun.EndDate.After(*e.GetRun(c.run.DagId, c.run.RunId).StartDate),
				"%s started before %s ended", c.run.DagId, upKey)
		}
	}
	e.SweepOnce()
	g = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStateSucceeded, g.State)
	require.NotNil(t, g.CompletedAt)
	for _, m := range g.Members {
		require.Equal(t, api.BackfillStateSucceeded, m.State, m.DagId)
		require.Equal(t, int64(6), m.Progress.Success, m.DagId)
	}
}

// An hourly → daily roll-up: each day waits for its 24 hours, and is claimable the moment the
// last of them succeeds; a daily → hourly fan-out: each hour waits for its day.
func TestGroupRollUpAndFanOutWaitForTheOverlappingRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("hourly", "@hourly", "")
	e.PutDagWith("daily", "@daily", "upstreams", []any{up("hourly")})
	g := e.CreateGroup([]string{"hourly", "daily"}, day(1, 1), day(1, 2).Add(23*time.Hour))
	require.Equal(t, int64(48), g.Dependencies)
	daily := member(t, g, "daily")
	require.Equal(t, int64(2), daily.Progress.Blocked)

	// The first day's 23 hours are not enough.
	for h := range 23 {
		e.MarkRunSucceeded("hourly", day(1, 1).Add(time.Duration(h)*time.Hour))
	}
	require.Empty(t, e.ClaimDag("w", "daily", 5))
	slots := call[api.BackfillDagRunCollection](e, http.StatusOK, http.MethodGet,
		backfillPath(daily.BackfillId)+"/dag_runs?blocked=true", nil)
	require.Len(t, slots.BackfillDagRuns, 2)
	require.Equal(t, int32(1), *slots.BackfillDagRuns[0].BlockedBy)
	require.Equal(t, int32(24), *slots.BackfillDagRuns[1].BlockedBy)
	e.MarkRunSucceeded("hourly", day(1, 1).Add(23*time.Hour))
	got := e.ClaimDag("w", "daily", 5)
	require.Len(t, got, 1)
	require.True(t, got[0].LogicalDate.Equal(day(1, 1)))
	slots = call[api.BackfillDagRunCollection](e, http.StatusOK, http.MethodGet,
		backfillPath(daily.BackfillId)+"/dag_runs?blocked=false", nil)
	require.Len(t, slots.BackfillDagRuns, 1)
	require.Equal(t, int64(1), slots.TotalEntries)

	// Fan-out: each hour of a day waits for that day.
	f := newEnv(t)
	f.PutDag("day", "@daily", "")
	f.PutDagWith("hour", "@hourly", "upstreams", []any{up("day")})
	fg := f.CreateGroup([]string{"day"}, day(1, 1), day(1, 1).Add(23*time.Hour), "include_downstream", "direct")
	require.Equal(t, int64(24), fg.Dependencies)
	require.Empty(t, f.ClaimDag("w", "hour", 5))
	f.MarkRunSucceeded("day", day(1, 1))
	require.Len(t, f.ClaimDag("w", "hour", 30), 10, "every hour of the day, up to max_active_runs")
}

// MarkRunSucceeded claims nothing: it marks the run of dagID at date success as an operator.
func (e *env) MarkRunSucceeded(dagID string, date time.Time) api.DagRun {
	e.t.Helper()
	return e.MarkRun(dagID, "backfill__"+date.UTC().Format(time.RFC3339), "success")
}

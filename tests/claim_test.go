package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// ClaimTogether releases n claimers at once and returns every run they got; an error or a
// non-200 answer fails the test once all have returned.
func (e *env) ClaimTogether(n int, body func(i int) map[string]any) []api.DagRun {
	e.t.Helper()
	var (
		mu  sync.Mutex
		all []api.DagRun
	)
	releaseTogether(e.t, n, func(i int) error {
		c, err := try[api.ClaimResponse](e, http.StatusOK, http.MethodPost, claimPath, body(i))
		mu.Lock()
		defer mu.Unlock()
		all = append(all, c.Runs...)
		return err
	})
	return all
}

// claimDates claims as one worker with each limit in turn and returns the logical dates
// handed out, in order.
func (e *env) claimDates(worker string, limits ...int) []time.Time {
	e.t.Helper()
	var got []time.Time
	for _, limit := range limits {
		for _, r := range e.Claim(worker, limit) {
			got = append(got, r.LogicalDate)
		}
	}
	return got
}

func requireDistinctRuns(t *testing.T, runs []api.DagRun) {
	t.Helper()
	seen := map[int64]bool{}
	for _, r := range runs {
		require.False(t, seen[r.Id], "run %d handed out twice", r.Id)
		seen[r.Id] = true
	}
}

// 16 concurrent claimers never push a backfill over its max_active_runs.
func TestClaimConcurrentClaimersRespectBackfillCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_cap", day(1, 1), day(1, 24), "max_active_runs", 3)
	require.EqualValues(t, 24, b.Progress.Total)
	body := func(i int) map[string]any {
		return map[string]any{"worker_id": fmt.Sprintf("w%d", i), "limit": 5}
	}

	runs := e.ClaimTogether(16, body)
	require.Len(t, runs, 3)
	requireDistinctRuns(t, runs)
	require.EqualValues(t, 3, runStates(t, e.DB, b.Id)["running"])
	require.EqualValues(t, 3, requireProgressExact(t, e, b.Id).Progress.Running)

	e.Report(runs[0], "success")
	more := e.ClaimTogether(16, body)
	require.Len(t, more, 1, "one report frees exactly one place")
	requireDistinctRuns(t, append(runs, more...))
	require.EqualValues(t, 3, runStates(t, e.DB, b.Id)["running"])

	require.Empty(t, e.ClaimTogether(16, body))
	checkInvariants(t, e.DB)
}

// Runs outside backfills: the DAG's max_active_runs holds under concurrent claims.
func TestClaimConcurrentClaimersRespectDagCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.PutDagWith("lc_dagcap", "@daily", "max_active_runs", 2)
	require.EqualValues(t, 2, d.MaxActiveRuns)
	for i := 1; i <= 10; i++ {
		e.CreateManualRun("lc_dagcap", day(3, i), nil)
	}
	body := func(i int) map[string]any {
		return map[string]any{"worker_id": fmt.Sprintf("w%d", i), "limit": 5}
	}
	runs := e.ClaimTogether(16, body)
	require.Len(t, runs, 2)
	requireDistinctRuns(t, runs)
	var running int
	require.NoError(t, e.DB.Get(&running,
		`SELECT count(*) FROM dag_runs WHERE dag_id = 'lc_dagcap' AND backfill_id IS NULL AND state = 'running'`))
	require.Equal(t, 2, running)
	// Oldest logical dates first.
	got := []time.Time{runs[0].LogicalDate, runs[1].LogicalDate}
	if got[0].After(got[1]) {
		got[0], got[1] = got[1], got[0]
	}
	require.True(t, got[0].Equal(day(3, 1)) && got[1].Equal(day(3, 2)), "got %v", got)

	e.Report(runs[1], "failed")
	more := e.ClaimTogether(16, body)
	require.Len(t, more, 1)
	require.True(t, more[0].LogicalDate.Equal(day(3, 3)))
	checkInvariants(t, e.DB)
}

// A DAG's is_paused stops its runs outside backfills, not its backfill's runs.
func TestClaimPausedDagStopsManualRunsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_dagpause"
	e.PutDagWith(dag, "@daily", "is_paused", true)
	manual := e.CreateManualRun(dag, day(5, 1), nil)
	b := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 2)))

	runs := e.ClaimN(2, "w1", 10)
	for _, r := range runs {
		require.Equal(t, b.Id, *r.BackfillId)
		require.Equal(t, api.RunType("backfill"), r.RunType)
	}
	require.Empty(t, e.Claim("w1", 10))
	require.Equal(t, api.DagRunState("queued"), e.GetRun(dag, manual.RunId).State)

	e.PutDagWith(dag, "@daily", "is_paused", false)
	runs = e.ClaimN(1, "w1", 10)
	require.Equal(t, manual.Id, runs[0].Id)
	require.Nil(t, runs[0].BackfillId)
	checkInvariants(t, e.DB)
}

// A backfill's runs come in sort_ordinal order: ascending logical dates.
func TestClaimOrderFollowsSortOrdinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_order", day(1, 1), day(1, 6))
	got := e.claimDates("w1", 3, 1, 2)
	require.Len(t, got, 6)
	for i, d := range got {
		require.True(t, d.Equal(day(1, 1+i)), "claim %d got %s", i, d)
	}
	slots := e.Slots(b.Id)
	for i, s := range slots {
		require.EqualValues(t, i+1, s.SortOrdinal)
		require.True(t, s.LogicalDate.Equal(day(1, 1+i)))
	}
}

// run_backwards hands out the latest date first.
func TestClaimOrderRunBackwards(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_backwards", day(1, 1), day(1, 5), "run_backwards", true)
	slots := e.Slots(b.Id)
	require.True(t, slots[0].LogicalDate.Equal(day(1, 5)))
	got := e.claimDates("w1", 2, 1, 5)
	require.Len(t, got, 5)
	for i, d := range got {
		require.True(t, d.Equal(day(1, 5-i)), "claim %d got %s", i, d)
	}
}

// Older backfills first, as far as their cap allows; then the next one.
func TestClaimOrderOlderBackfillsFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The DAG ids sort opposite to the backfills' age, so that dag_id order cannot pass for
	// backfill order.
	e.PutDag("lc_old_z", "@daily", "")
	e.PutDag("lc_old_a", "@daily", "")
	older := e.CreateBackfill(backfillBody("lc_old_z", day(1, 1), day(1, 5), "max_active_runs", 2))
	newer := e.CreateBackfill(backfillBody("lc_old_a", day(1, 1), day(1, 5), "max_active_runs", 10))
	require.Less(t, older.Id, newer.Id)

	type got struct {
		backfill int64
		date     time.Time
	}
	claim := func(limit int) []got {
		t.Helper()
		var out []got
		for _, r := range e.Claim("w1", limit) {
			out = append(out, got{*r.BackfillId, r.LogicalDate})
		}
		return out
	}
	first := claim(3)
	require.Len(t, first, 3)
	require.Equal(t, got{older.Id, day(1, 1)}, first[0])
	require.Equal(t, got{older.Id, day(1, 2)}, first[1])
	require.Equal(t, got{newer.Id, day(1, 1)}, first[2])

	// The older one is at its cap: the newer one goes on.
	require.Equal(t, []got{{newer.Id, day(1, 2)}}, claim(1))

	// A place frees in the older one: it comes first again.
	res := e.PatchRun("lc_old_z", "backfill__"+ts(day(1, 1)), "success", "w1")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.Equal(t, []got{{older.Id, day(1, 3)}, {newer.Id, day(1, 3)}}, claim(2))
	checkInvariants(t, e.DB)
}

// The dag_id filter, the empty answer, and what a claimed run looks like.
func TestClaimFilterEmptyAndLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// Nothing to claim: 200 {"runs": []}, an array, not null.
	res := e.Do(http.MethodPost, claimPath, map[string]any{"worker_id": "w1"})
	require.Equal(t, http.StatusOK, res.Status)
	require.JSONEq(t, `{"runs": []}`, string(res.Body))

	e.PutDag("lc_filter_a", "@daily", "")
	e.PutDag("lc_filter_b", "@daily", "")
	e.CreateBackfill(backfillBody("lc_filter_a", day(1, 1), day(1, 3)))
	bb := e.CreateBackfill(backfillBody("lc_filter_b", day(1, 1), day(1, 3)))
	e.CreateManualRun("lc_filter_a", day(6, 1), nil)

	e.Clock.Advance(3 * time.Second)
	now := e.Clock.Now()
	runs := e.ClaimWithN(3, map[string]any{"worker_id": "w-b", "limit": 100, "dag_id": "lc_filter_b", "lease_seconds": 120})
	for _, r := range runs {
		require.Equal(t, "lc_filter_b", r.DagId)
		require.Equal(t, bb.Id, *r.BackfillId)
		require.Equal(t, api.DagRunState("running"), r.State)
		require.Equal(t, "w-b", *r.WorkerId)
		require.EqualValues(t, 1, r.Attempt)
		requireInstant(t, now, r.StartDate, "start_date")
		requireInstant(t, now.Add(120*time.Second), r.LeaseExpiresAt, "lease_expires_at")
		require.Nil(t, r.EndDate)
		require.Equal(t, r, e.GetRun("lc_filter_b", r.RunId))
	}
	res = e.Do(http.MethodPost, claimPath, map[string]any{"worker_id": "w-b", "limit": 100, "dag_id": "lc_filter_b"})
	require.Equal(t, http.StatusOK, res.Status)
	require.JSONEq(t, `{"runs": []}`, string(res.Body))
	// A dag_id that names no DAG matches no run.
	require.Empty(t, e.ClaimWith(map[string]any{"worker_id": "w-b", "limit": 100, "dag_id": "lc_filter_none"}))

	// Default lease: 300 s.
	runs = e.ClaimWithN(4, map[string]any{"worker_id": "w-a", "limit": 100})
	for _, r := range runs {
		require.Equal(t, "lc_filter_a", r.DagId)
		requireInstant(t, now.Add(300*time.Second), r.LeaseExpiresAt, "default lease_expires_at")
	}
	checkInvariants(t, e.DB)
}

// Heartbeats extend the lease of its holder only.
func TestClaimHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_hb", day(1, 1), day(1, 3), "max_active_runs", 1)
	runs := e.ClaimN(1, "w1", 1)
	run := runs[0]
	requireInstant(t, e.Clock.Now().Add(300*time.Second), run.LeaseExpiresAt)

	e.Clock.Advance(100 * time.Second)
	res := e.Heartbeat(run.Id, "w1")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var hb api.HeartbeatResponse
	res.Decode(t, &hb)
	want := e.Clock.Now().Add(300 * time.Second)
	requireInstant(t, want, &hb.LeaseExpiresAt)
	require.False(t, hb.CancelRequested)
	got := e.GetRun("lc_hb", run.RunId)
	requireInstant(t, want, got.LeaseExpiresAt)
	require.Equal(t, api.DagRunState("running"), got.State)

	// The heartbeat keeps the run alive past its first lease.
	e.Clock.Advance(250 * time.Second)
	e.SweepOnce()
	require.Equal(t, api.DagRunState("running"), e.GetRun("lc_hb", run.RunId).State)

	requireProblem(t, e.Heartbeat(run.Id, "w2"), http.StatusConflict, "lease_lost")
	requireProblem(t, e.Heartbeat(987654321, "w1"), http.StatusNotFound, "run_not_found")

	// A queued run is not leased to anyone.
	var queuedID int64
	for _, s := range e.Slots(b.Id) {
		if *s.State == "queued" {
			queuedID = *s.DagRunId
			break
		}
	}
	require.NotZero(t, queuedID)
	requireProblem(t, e.Heartbeat(queuedID, "w1"), http.StatusConflict, "lease_lost")

	// Nor a finished one.
	e.Report(run, "success")
	requireProblem(t, e.Heartbeat(run.Id, "w1"), http.StatusConflict, "lease_lost")
	checkInvariants(t, e.DB)
}

// Claims skip a backfill another claim holds, so with every worker on one backfill some of
// them meet it held; the claim then tries again while that backfill is claimable, and a worker
// is not told "nothing to do" while runs of its only backfill wait. The retry has a time budget
// (500 ms), so the test warms the pool's sessions first and uses as many claimers as the
// machine's cores can serve within it under the race detector.
func TestConcurrentClaimsOnOneBackfillAreNeverEmptyWhileRunsWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const workers, rounds = 4, 10
	e.PutDag("one_owner", "@daily", "UTC")
	bf := e.DailyBackfill("one_owner", day(1, 1), day(6, 1), "max_active_runs", 1000)
	require.Greater(t, int(bf.Progress.Total), workers*(rounds+1))
	claim := func(round, i int) ([]api.DagRun, error) {
		res, err := e.do(http.MethodPost, claimPath, map[string]any{
			"worker_id": fmt.Sprintf("w%d_%d", round, i), "limit": 1})
		if err != nil {
			return nil, err
		}
		var got api.ClaimResponse
		if err := json.Unmarshal(res.Body, &got); err != nil || res.Status != http.StatusOK {
			return nil, fmt.Errorf("claim: %d %s", res.Status, res.Body)
		}
		return got.Runs, nil
	}
	// Warm-up: every claimer's session opened and the statement planned once.
	warm := 0
	var mu sync.Mutex
	releaseTogether(t, workers, func(i int) error {
		runs, err := claim(-1, i)
		mu.Lock()
		warm += len(runs)
		mu.Unlock()
		return err
	})
	for round := range rounds {
		releaseTogether(t, workers, func(i int) error {
			runs, err := claim(round, i)
			if err != nil {
				return err
			}
			if len(runs) != 1 {
				return fmt.Errorf("round %d worker %d: claim of limit 1 handed out %d runs while runs were queued", round, i, len(runs))
			}
			return nil
		})
	}
	require.Equal(t, warm+workers*rounds, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'running'`))
	checkInvariants(t, e.DB)
}

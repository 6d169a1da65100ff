package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// waitingClaim sends a claim with wait_seconds from e on its own goroutine and answers its
// runs and when the answer came.
func waitingClaim(e *env, body map[string]any) <-chan claimAnswer {
	out := make(chan claimAnswer, 1)
	go func() {
		c, err := try[api.ClaimResponse](e, http.StatusOK, http.MethodPost, claimPath, body)
		out <- claimAnswer{runs: c.Runs, at: time.Now(), err: err}
	}()
	return out
}

type claimAnswer struct {
	runs []api.DagRun
	at   time.Time
	err  error
}

// A waiting claim with nothing to claim answers no runs once its wait is over, not before.
func TestWaitingClaimIsEmptyAfterItsWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := time.Now()
	got := <-waitingClaim(e, map[string]any{"worker_id": "w", "wait_seconds": 1})
	require.NoError(t, got.err)
	require.Empty(t, got.runs)
	require.GreaterOrEqual(t, got.at.Sub(start), time.Second)
	require.Less(t, got.at.Sub(start), 3*time.Second)
}

// A claim waiting on one replica is answered as soon as a backfill is created on another:
// well within the second its polling would take, so by the other replica's NOTIFY.
func TestWaitingClaimIsAnsweredWhenABackfillIsCreatedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.PutDag("wait_create", "@daily", "")
	pending := waitingClaim(b, map[string]any{"worker_id": "w", "wait_seconds": 20, "dag_id": "wait_create"})
	time.Sleep(150 * time.Millisecond) // let the claim find nothing and wait (what is tested)
	a.CreateBackfill(backfillBody("wait_create", day(1, 1), day(1, 2)))
	created := time.Now()
	got := <-pending
	require.NoError(t, got.err)
	require.Len(t, got.runs, 1)
	require.Less(t, got.at.Sub(created), 500*time.Millisecond, "answered by the NOTIFY, not the next poll")
	checkInvariants(t, a.DB)
}

// A report on another replica that frees a backfill's only slot wakes a claim waiting for it.
func TestWaitingClaimIsAnsweredWhenAReportFreesASlot(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.DailyBackfill("wait_slot", day(1, 1), day(1, 2), "max_active_runs", 1)
	first := a.ClaimN(1, "w1", 5)[0]
	pending := waitingClaim(b, map[string]any{"worker_id": "w2", "wait_seconds": 20, "limit": 5})
	time.Sleep(150 * time.Millisecond)
	a.Report(first, "success")
	reported := time.Now()
	got := <-pending
	require.NoError(t, got.err)
	require.Len(t, got.runs, 1)
	require.NotEqual(t, first.Id, got.runs[0].Id)
	require.Less(t, got.at.Sub(reported), 500*time.Millisecond)
}

// A deferred run's time coming is found by the waiting claim's polling (no commit announces
// it): within about a second of the database's clock passing it.
func TestWaitingClaimTakesADeferredRunWhenItsTimeComes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.DailyBackfill("wait_defer", day(1, 1), day(1, 1))
	run := e.ClaimN(1, "w1", 1)[0]
	e.Defer(run, 60, "")
	pending := waitingClaim(e, map[string]any{"worker_id": "w2", "wait_seconds": 20})
	time.Sleep(150 * time.Millisecond)
	e.Clock.Advance(time.Minute)
	moved := time.Now()
	got := <-pending
	require.NoError(t, got.err)
	require.Len(t, got.runs, 1)
	require.Less(t, got.at.Sub(moved), 1500*time.Millisecond)
}

// wait_seconds is 0..30: beyond is 400 invalid_request.
func TestWaitSecondsOutOfRangeIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, w := range []int{-1, 31} {
		res := e.Do(http.MethodPost, claimPath, map[string]any{"worker_id": "w", "wait_seconds": w})
		require.Equal(t, http.StatusBadRequest, res.Status, "%d: %s", w, res.Body)
	}
}

// With the database's clock following real time, a waiting claim takes a deferred run at
// its not_before, not at its next one-second poll: it sets its next try by the earliest
// deferral ahead.
func TestWaitingClaimWakesAtADeferralsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.DailyBackfill("wait_defer_timer", day(1, 1), day(1, 1))
	followRealTime(t, e)
	run := e.ClaimN(1, "w1", 1)[0]
	pending := waitingClaim(e, map[string]any{"worker_id": "w2", "wait_seconds": 20})
	time.Sleep(300 * time.Millisecond) // the claim waits
	deferred := call[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(run.DagId, run.RunId),
		map[string]any{"state": "deferred", "worker_id": "w1", "retry_after_seconds": 2})
	due := time.Now().Add(time.Until(*deferred.NotBefore))
	// An unrelated change half a second later wakes the claim once more, so that its polls
	// (every second from its last wake) fall half a second off the deferral's end.
	time.Sleep(500 * time.Millisecond)
	e.PutDag("wait_defer_other", "@daily", "")
	got := <-pending
	require.NoError(t, got.err)
	require.Len(t, got.runs, 1)
	late := got.at.Sub(due)
	t.Logf("answered %s after the deferral's end", late)
	require.Less(t, late, 300*time.Millisecond, "by its timer, not its next poll")
}

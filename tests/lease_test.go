package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// requireRequeued checks that a run went back to queued for this attempt, free of any lease.
func requireRequeued(t *testing.T, e *env, id int64, attempt int) {
	t.Helper()
	r := runByID(t, e.DB, id)
	require.Equal(t, "queued", r.State)
	require.Equal(t, attempt, r.Attempt)
	require.Nil(t, r.WorkerID)
	require.Nil(t, r.LeaseExpiresAt)
	require.Nil(t, r.EndDate)
}

// An expired lease puts the run back to queued with attempt + 1; the old worker has lost it.
func TestLeaseExpiryRequeuesRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_lease"
	b := e.DailyBackfill(dag, day(1, 1), day(1, 3), "max_active_runs", 1)
	runs := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "lease_seconds": 60})
	run := runs[0]

	e.Clock.Advance(59 * time.Second)
	e.SweepOnce()
	require.Equal(t, "running", runByID(t, e.DB, run.Id).State, "lease still live")

	// Expired but not yet swept: the lease is already lost.
	e.Clock.Advance(2 * time.Second)
	requireProblem(t, e.Heartbeat(run.Id, "w1"), http.StatusConflict, "lease_lost")

	e.SweepOnce()
	requireRequeued(t, e, run.Id, 2)
	got := e.GetRun(dag, run.RunId)
	require.Equal(t, api.DagRunState("queued"), got.State)
	require.EqualValues(t, 2, got.Attempt)
	require.Nil(t, got.WorkerId)
	require.Nil(t, got.LeaseExpiresAt)
	b2 := requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillProgress{Total: 3, Queued: 3}, b2.Progress)
	require.Equal(t, api.BackfillState("running"), b2.State)

	requireProblem(t, e.Heartbeat(run.Id, "w1"), http.StatusConflict, "lease_lost")
	requireProblem(t, e.PatchRun(dag, run.RunId, "success", "w1"), http.StatusConflict, "lease_lost")
	require.Equal(t, got, e.GetRun(dag, run.RunId), "refused reports change nothing")

	// The run is handed out again (first in order), now to w2; w1 still cannot touch it.
	runs = e.ClaimN(1, "w2", 5)
	require.Equal(t, run.Id, runs[0].Id)
	require.EqualValues(t, 2, runs[0].Attempt)
	requireProblem(t, e.Heartbeat(run.Id, "w1"), http.StatusConflict, "lease_lost")
	requireProblem(t, e.PatchRun(dag, run.RunId, "success", "w1"), http.StatusConflict, "lease_lost")
	out := e.Report(runs[0], "success")
	require.EqualValues(t, 2, out.Attempt)
	checkInvariants(t, e.DB)
}

// At MAX_ATTEMPTS an expired lease fails the run, and the backfill can then finish failed.
func TestLeaseMaxAttemptsFailsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxAttempts(2))
	const dag = "lc_lease_max"
	b := e.DailyBackfill(dag, day(1, 1), day(1, 3), "max_active_runs", 1)
	claim := func() api.DagRun {
		t.Helper()
		runs := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "lease_seconds": 30})
		return runs[0]
	}

	first := claim()
	require.EqualValues(t, 1, first.Attempt)
	e.Clock.Advance(31 * time.Second)
	e.SweepOnce()
	requireRequeued(t, e, first.Id, 2)

	second := claim()
	require.Equal(t, first.Id, second.Id)
	require.EqualValues(t, 2, second.Attempt)
	e.Clock.Advance(31 * time.Second)
	e.SweepOnce()
	r := runByID(t, e.DB, first.Id)
	require.Equal(t, "failed", r.State)
	require.Equal(t, 2, r.Attempt)
	require.Nil(t, r.LeaseExpiresAt)
	requireInstant(t, e.Clock.Now(), r.EndDate, "end_date")
	got := requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillProgress{Total: 3, Queued: 2, Failed: 1}, got.Progress)
	require.Equal(t, api.BackfillState("running"), got.State)

	for range 2 {
		run := claim()
		require.NotEqual(t, first.Id, run.Id)
		e.SweepOnce()
		require.Equal(t, api.BackfillState("running"), e.GetBackfill(b.Id).State)
		e.Report(run, "success")
	}
	e.SweepOnce()
	got = requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillState("failed"), got.State)
	require.Equal(t, api.BackfillProgress{Total: 3, Success: 2, Failed: 1}, got.Progress)
	require.NotNil(t, got.CompletedAt)
	checkInvariants(t, e.DB)
}

// The last run's expiry at MAX_ATTEMPTS lets its backfill finish in the same pass.
func TestLeaseLastExpiryFinishesBackfillInOnePass(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxAttempts(1))
	const dag = "lc_lease_last"
	b := e.DailyBackfill(dag, day(1, 1), day(1, 2))
	runs := e.ClaimWithN(2, map[string]any{"worker_id": "w1", "limit": 2, "lease_seconds": 10})
	e.Report(runs[0], "success")
	e.Clock.Advance(11 * time.Second)
	e.SweepOnce()
	got := requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillState("failed"), got.State)
	require.Equal(t, api.BackfillProgress{Total: 2, Success: 1, Failed: 1}, got.Progress)
}

// Runs outside backfills expire too, up to MAX_ATTEMPTS (default 3).
func TestLeaseManualRunExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_lease_manual"
	e.PutDag(dag, "@daily", "")
	manual := e.CreateManualRun(dag, day(4, 1), nil)
	for attempt := 1; attempt <= 3; attempt++ {
		runs := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "lease_seconds": 10})
		require.Equal(t, manual.Id, runs[0].Id)
		require.EqualValues(t, attempt, runs[0].Attempt)
		e.Clock.Advance(11 * time.Second)
		e.SweepOnce()
		if attempt < 3 {
			requireRequeued(t, e, manual.Id, attempt+1)
			got := e.GetRun(dag, manual.RunId)
			require.Equal(t, api.RunType("manual"), got.RunType)
			require.Nil(t, got.BackfillId)
		}
	}
	r := runByID(t, e.DB, manual.Id)
	require.Equal(t, "failed", r.State)
	require.Equal(t, 3, r.Attempt)
	require.Empty(t, e.Claim("w1", 10))
	checkInvariants(t, e.DB)
}

// A lease that expires while the backfill is paused puts the run back; it waits for unpause.
func TestLeaseExpiryInPausedBackfill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_lease_paused"
	b := e.DailyBackfill(dag, day(1, 1), day(1, 2))
	runs := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "limit": 1, "lease_seconds": 10})
	e.ActionOK(b.Id, "pause")
	e.Clock.Advance(11 * time.Second)
	e.SweepOnce()
	requireRequeued(t, e, runs[0].Id, 2)
	got := requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillState("paused"), got.State)
	require.Empty(t, e.Claim("w2", 10))
	e.ActionOK(b.Id, "unpause")
	again := e.ClaimN(2, "w2", 10)
	require.Equal(t, runs[0].Id, again[0].Id)
	checkInvariants(t, e.DB)
}

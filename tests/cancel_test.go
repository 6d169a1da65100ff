package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// Cancel with a run running: queued runs are canceled at once, the backfill stays canceling
// until the running run reports, and then one sweep pass finishes it.
func TestCancelWithRunningRun(t *testing.T) {
	t.Parallel()
	for _, report := range []string{"success", "canceled", "failed"} {
		t.Run("reports "+report, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const dag = "lc_cancel"
			b := e.DailyBackfill(dag, day(1, 1), day(1, 5))
			runs := e.ClaimN(1, "w1", 1)
			run := runs[0]

			e.Clock.Advance(2 * time.Second)
			c := e.ActionOK(b.Id, "cancel")
			require.Equal(t, api.BackfillState("canceling"), c.State)
			require.Nil(t, c.CompletedAt)
			require.False(t, c.IsPaused)
			require.Equal(t, api.BackfillProgress{Total: 5, Running: 1, Canceled: 4}, c.Progress)
			require.Equal(t, c.Progress, requireProgressExact(t, e, b.Id).Progress)
			for _, s := range e.Slots(b.Id) {
				r := runByID(t, e.DB, *s.DagRunId)
				if r.ID == run.Id {
					require.Equal(t, "running", r.State)
					continue
				}
				require.Equal(t, "canceled", r.State)
				requireInstant(t, e.Clock.Now(), r.EndDate, "end_date of a canceled queued run")
			}
			require.Empty(t, e.Claim("w2", 10), "a canceling backfill hands nothing out")

			res := e.Heartbeat(run.Id, "w1")
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			var hb api.HeartbeatResponse
			res.Decode(t, &hb)
			require.True(t, hb.CancelRequested)

			for range 3 {
				e.SweepOnce()
			}
			got := e.GetBackfill(b.Id)
			require.Equal(t, api.BackfillState("canceling"), got.State, "a run still runs")
			require.Nil(t, got.CompletedAt)

			again := e.ActionOK(b.Id, "cancel")
			require.Equal(t, api.BackfillState("canceling"), again.State, "cancel on canceling is 200")
			requireProblem(t, e.Action(b.Id, "pause"), http.StatusConflict, "backfill_not_active")

			e.Report(run, report)
			require.Equal(t, api.BackfillState("canceling"), e.GetBackfill(b.Id).State, "terminal only through the sweep")
			e.Clock.Advance(3 * time.Second)
			e.SweepOnce()
			got = requireProgressExact(t, e, b.Id)
			require.Equal(t, api.BackfillState("canceled"), got.State)
			requireInstant(t, e.Clock.Now(), got.CompletedAt, "completed_at")

			requireProblem(t, e.Action(b.Id, "cancel"), http.StatusConflict, "backfill_not_active")
			e.CreateBackfill(backfillBody(dag, day(2, 1), day(2, 2)))
			checkInvariants(t, e.DB)
		})
	}
}

// Cancel with nothing running finishes at once, in the PUT's answer.
func TestCancelWithNothingRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_cancel_now"
	e.PutDag(dag, "@daily", "")

	b := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 4)))
	e.Clock.Advance(time.Second)
	c := e.ActionOK(b.Id, "cancel")
	require.Equal(t, api.BackfillState("canceled"), c.State)
	requireInstant(t, e.Clock.Now(), c.CompletedAt, "completed_at")
	require.Equal(t, api.BackfillProgress{Total: 4, Canceled: 4}, c.Progress)
	require.Equal(t, c, requireProgressExact(t, e, b.Id))
	requireProblem(t, e.Action(b.Id, "cancel"), http.StatusConflict, "backfill_not_active")

	// Some runs finished, none running, paused: canceled at once, history kept.
	b = e.CreateBackfill(backfillBody(dag, day(2, 1), day(2, 4)))
	runs := e.ClaimN(2, "w1", 2)
	e.Report(runs[0], "success")
	e.Report(runs[1], "failed")
	e.ActionOK(b.Id, "pause")
	c = e.ActionOK(b.Id, "cancel")
	require.Equal(t, api.BackfillState("canceled"), c.State)
	require.False(t, c.IsPaused)
	require.NotNil(t, c.CompletedAt)
	require.Equal(t, api.BackfillProgress{Total: 4, Success: 1, Failed: 1, Canceled: 2}, c.Progress)
	requireProgressExact(t, e, b.Id)

	e.CreateBackfill(backfillBody(dag, day(3, 1), day(3, 1)))
	checkInvariants(t, e.DB)
}

// The expired lease of a run of a canceling backfill cancels the run; the same pass then
// finishes the backfill.
func TestCancelExpiredLeaseOfCancelingBackfillCancelsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_cancel_lease"
	b := e.DailyBackfill(dag, day(1, 1), day(1, 3))
	runs := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "limit": 1, "lease_seconds": 60})
	require.Equal(t, api.BackfillState("canceling"), e.ActionOK(b.Id, "cancel").State)

	e.Clock.Advance(59 * time.Second)
	e.SweepOnce()
	require.Equal(t, "running", runByID(t, e.DB, runs[0].Id).State, "lease not expired yet")

	e.Clock.Advance(2 * time.Second)
	e.SweepOnce()
	r := runByID(t, e.DB, runs[0].Id)
	require.Equal(t, "canceled", r.State)
	require.Equal(t, 1, r.Attempt)
	require.Nil(t, r.LeaseExpiresAt)
	requireInstant(t, e.Clock.Now(), r.EndDate, "end_date")
	got := requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillState("canceled"), got.State)
	require.Equal(t, api.BackfillProgress{Total: 3, Canceled: 3}, got.Progress)
	requireProblem(t, e.PatchRun(dag, runs[0].RunId, "success", "w1"), http.StatusConflict, "lease_lost")
	checkInvariants(t, e.DB)
}

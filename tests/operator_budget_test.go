package tests

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// 16 workers fail their runs at the same instant on a backfill with max_failed_runs 3, while
// claimers keep asking for its runs. The pause happens in the transaction that fails the
// third run, and claims lock the backfill row and re-read its state: so while the reports
// land, claims can only take the slots freed by the (at most two) failures that committed
// before the pausing one, and after the reports nothing more is handed out.
func TestBudgetPauseUnderConcurrentFailingReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Every claim commit records the backfill's state in force then (the claim holds the row).
	e.InstallClaimAudit()
	b := e.DailyBackfill("budget16", day(1, 1), day(2, 29), "max_active_runs", 16, "max_failed_runs", 3)
	require.NotNil(t, b.MaxFailedRuns)
	require.EqualValues(t, 3, *b.MaxFailedRuns)
	require.Nil(t, b.PauseReason)
	runs := e.ClaimDag("holder", "budget16", 16)
	require.Len(t, runs, 16)

	// 16 reporters and 4 claimers, released together; the claimers claim until the last
	// report is in.
	var (
		reportsLeft atomic.Int64
		duringRace  atomic.Int64
	)
	reportsLeft.Store(int64(len(runs)))
	releaseTogether(t, len(runs)+4, func(i int) error {
		if i < len(runs) {
			defer reportsLeft.Add(-1)
			_, err := try[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(runs[i].DagId, runs[i].RunId),
				map[string]any{"state": "failed", "worker_id": "holder", "note": fmt.Sprintf("upstream down (%d)", i)})
			return err
		}
		for reportsLeft.Load() > 0 {
			c, err := try[api.ClaimResponse](e, http.StatusOK, http.MethodPost, claimPath,
				map[string]any{"worker_id": fmt.Sprintf("c%d", i), "limit": 16, "dag_id": "budget16"})
			if err != nil {
				return err
			}
			duringRace.Add(int64(len(c.Runs)))
		}
		return nil
	})

	got := e.GetBackfill(b.Id)
	requirePaused(t, got, api.BackfillPauseReasonFailureBudget)
	require.EqualValues(t, 16, got.Progress.Failed)
	require.LessOrEqual(t, duringRace.Load(), int64(2),
		"claims handed out runs of the backfill after the failure that exhausted its budget")
	require.Empty(t, e.ClaimDag("after", "budget16", 16), "a paused backfill's runs were handed out")
	var audited, whilePaused int
	require.NoError(t, e.DB.Get(&audited, `SELECT count(*) FROM invariants_claim_audit`))
	require.NoError(t, e.DB.Get(&whilePaused, `SELECT count(*) FROM invariants_claim_audit WHERE state <> 'running'`))
	require.Zero(t, whilePaused, "a claim committed after the pausing commit")
	t.Logf("runs claimed while the 16 failures landed: %d (at most 2 allowed); claim commits audited %d, none while paused",
		duringRace.Load(), audited)

	// Notes are kept on the failed runs.
	r := e.GetRun(runs[0].DagId, runs[0].RunId)
	require.NotNil(t, r.Note)
	require.Equal(t, "upstream down (0)", *r.Note)
	checkInvariants(t, e.DB)
}

// Unpause clears pause_reason; the next failure pauses again unless max_failed_runs was
// raised; lowering max_failed_runs at or below the failed count does not pause by itself.
func TestBudgetUnpauseRaiseAndLower(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("budget_cycle", day(1, 1), day(1, 10), "max_active_runs", 1, "max_failed_runs", 1)

	e.ReportFailed(e.ClaimDag("w", "budget_cycle", 1)[0], "boom")
	requirePaused(t, e.GetBackfill(b.Id), api.BackfillPauseReasonFailureBudget)

	u := e.ActionOK(b.Id, "unpause")
	require.Equal(t, api.BackfillStateRunning, u.State)
	require.Nil(t, u.PauseReason)
	e.ReportFailed(e.ClaimDag("w", "budget_cycle", 1)[0], "boom again")
	requirePaused(t, e.GetBackfill(b.Id), api.BackfillPauseReasonFailureBudget)

	// Raise the budget: the next failure does not pause.
	p := e.PatchBackfill(b.Id, map[string]any{"max_failed_runs": 5})
	require.EqualValues(t, 5, *p.MaxFailedRuns)
	requirePaused(t, p, api.BackfillPauseReasonFailureBudget) // PATCH changes no state
	e.ActionOK(b.Id, "unpause")
	e.ReportFailed(e.ClaimDag("w", "budget_cycle", 1)[0], "third")
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(b.Id).State)

	// Lower it to the failed count (3): no pause by itself; a success does not pause either;
	// the next failure does.
	p = e.PatchBackfill(b.Id, map[string]any{"max_failed_runs": 2})
	require.Equal(t, api.BackfillStateRunning, p.State)
	e.Report(e.ClaimDag("w", "budget_cycle", 1)[0], "success")
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(b.Id).State)
	e.ReportFailed(e.ClaimDag("w", "budget_cycle", 1)[0], "fourth")
	requirePaused(t, e.GetBackfill(b.Id), api.BackfillPauseReasonFailureBudget)

	// A user pause says so; null removes the budget.
	e.ActionOK(b.Id, "unpause")
	requirePaused(t, e.ActionOK(b.Id, "pause"), api.BackfillPauseReasonUser)
	p = e.PatchBackfill(b.Id, map[string]any{"max_failed_runs": nil})
	require.Nil(t, p.MaxFailedRuns)
	e.ActionOK(b.Id, "unpause")
	e.ReportFailed(e.ClaimDag("w", "budget_cycle", 1)[0], "fifth")
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(b.Id).State)

	// Canceling a paused backfill clears the reason.
	e.ActionOK(b.Id, "pause")
	c := e.ActionOK(b.Id, "cancel")
	require.Nil(t, c.PauseReason)
	checkInvariants(t, e.DB)
}

// A lease that expires at MAX_ATTEMPTS fails the run, and that failure spends the budget in
// the sweep's own transaction.
func TestBudgetPauseByLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxAttempts(1))
	b := e.DailyBackfill("budget_lease", day(1, 1), day(1, 5), "max_active_runs", 2, "max_failed_runs", 1)
	runs := e.ClaimWithN(1, map[string]any{"worker_id": "gone", "limit": 1, "lease_seconds": 10, "dag_id": "budget_lease"})
	e.Clock.Advance(11 * time.Second)
	e.SweepOnce()
	require.Equal(t, api.DagRunStateFailed, e.GetRun(runs[0].DagId, runs[0].RunId).State)
	got := e.GetBackfill(b.Id)
	requirePaused(t, got, api.BackfillPauseReasonFailureBudget)
	require.EqualValues(t, 1, got.Progress.Failed)
	require.Empty(t, e.ClaimDag("w", "budget_lease", 5))
	checkInvariants(t, e.DB)
}

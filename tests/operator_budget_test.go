package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/invariants"
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
	require.NoError(t, invariants.InstallClaimAudit(context.Background(), e.DB))
	e.PutDag("budget16", "@daily", "")
	b := e.CreateBackfill(backfillBody("budget16", day(1, 1), day(2, 29), "max_active_runs", 16, "max_failed_runs", 3))
	require.NotNil(t, b.MaxFailedRuns)
	require.EqualValues(t, 3, *b.MaxFailedRuns)
	require.Nil(t, b.PauseReason)
	runs := opClaimDag(e, "holder", "budget16", 16)
	require.Len(t, runs, 16)

	var (
		start       = make(chan struct{})
		reporters   sync.WaitGroup
		claimers    sync.WaitGroup
		reportsDone atomic.Bool
		duringRace  atomic.Int64
		errs        lcErrs
	)
	for i, run := range runs {
		reporters.Add(1)
		go func() {
			defer reporters.Done()
			<-start
			res, err := e.do(http.MethodPatch, lcRunPath(run.DagId, run.RunId),
				map[string]any{"state": "failed", "worker_id": "holder", "note": fmt.Sprintf("upstream down (%d)", i)})
			errs.expect("report failed", res, err, map[int]string{200: ""})
		}()
	}
	for i := range 4 {
		claimers.Add(1)
		go func() {
			defer claimers.Done()
			<-start
			for !reportsDone.Load() {
				res, err := e.do(http.MethodPost, lcClaimPath, map[string]any{"worker_id": fmt.Sprintf("c%d", i), "limit": 16, "dag_id": "budget16"})
				if errs.expect("claim", res, err, map[int]string{200: ""}) != http.StatusOK {
					return
				}
				var c api.ClaimResponse
				if err := json.Unmarshal(res.Body, &c); err != nil {
					errs.add("decode claim: %v", err)
					return
				}
				duringRace.Add(int64(len(c.Runs)))
			}
		}()
	}
	close(start)
	reporters.Wait()
	reportsDone.Store(true)
	claimers.Wait()
	require.Zero(t, errs.n, "%v", errs.msgs)

	got := e.GetBackfill(b.Id)
	opRequirePaused(t, got, api.BackfillPauseReasonFailureBudget)
	require.EqualValues(t, 16, got.Progress.Failed)
	require.LessOrEqual(t, duringRace.Load(), int64(2),
		"claims handed out runs of the backfill after the failure that exhausted its budget")
	require.Empty(t, opClaimDag(e, "after", "budget16", 16), "a paused backfill's runs were handed out")
	var audited, whilePaused int
	require.NoError(t, e.DB.Get(&audited, `SELECT count(*) FROM invariants_claim_audit`))
	require.NoError(t, e.DB.Get(&whilePaused, `SELECT count(*) FROM invariants_claim_audit WHERE state <> 'running'`))
	require.Zero(t, whilePaused, "a claim committed after the pausing commit")
	t.Logf("runs claimed while the 16 failures landed: %d (at most 2 allowed); claim commits audited %d, none while paused",
		duringRace.Load(), audited)

	// Notes are kept on the failed runs.
	r := lcGetRun(e, runs[0].DagId, runs[0].RunId)
	require.NotNil(t, r.Note)
	require.Equal(t, "upstream down (0)", *r.Note)
	lcCheckInvariants(t, e.DB)
}

// Unpause clears pause_reason; the next failure pauses again unless max_failed_runs was
// raised; lowering max_failed_runs at or below the failed count does not pause by itself.
func TestBudgetUnpauseRaiseAndLower(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("budget_cycle", "@daily", "")
	b := e.CreateBackfill(backfillBody("budget_cycle", day(1, 1), day(1, 10), "max_active_runs", 1, "max_failed_runs", 1))

	opFail(e, opClaimDag(e, "w", "budget_cycle", 1)[0], "boom")
	opRequirePaused(t, e.GetBackfill(b.Id), api.BackfillPauseReasonFailureBudget)

	u := lcActionOK(e, b.Id, "unpause")
	require.Equal(t, api.BackfillStateRunning, u.State)
	require.Nil(t, u.PauseReason)
	opFail(e, opClaimDag(e, "w", "budget_cycle", 1)[0], "boom again")
	opRequirePaused(t, e.GetBackfill(b.Id), api.BackfillPauseReasonFailureBudget)

	// Raise the budget: the next failure does not pause.
	p := opPatch(e, b.Id, map[string]any{"max_failed_runs": 5})
	require.EqualValues(t, 5, *p.MaxFailedRuns)
	opRequirePaused(t, p, api.BackfillPauseReasonFailureBudget) // PATCH changes no state
	lcActionOK(e, b.Id, "unpause")
	opFail(e, opClaimDag(e, "w", "budget_cycle", 1)[0], "third")
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(b.Id).State)

	// Lower it to the failed count (3): no pause by itself; a success does not pause either;
	// the next failure does.
	p = opPatch(e, b.Id, map[string]any{"max_failed_runs": 2})
	require.Equal(t, api.BackfillStateRunning, p.State)
	e.Report(opClaimDag(e, "w", "budget_cycle", 1)[0], "success")
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(b.Id).State)
	opFail(e, opClaimDag(e, "w", "budget_cycle", 1)[0], "fourth")
	opRequirePaused(t, e.GetBackfill(b.Id), api.BackfillPauseReasonFailureBudget)

	// A user pause says so; null removes the budget.
	lcActionOK(e, b.Id, "unpause")
	opRequirePaused(t, lcActionOK(e, b.Id, "pause"), api.BackfillPauseReasonUser)
	p = opPatch(e, b.Id, map[string]any{"max_failed_runs": nil})
	require.Nil(t, p.MaxFailedRuns)
	lcActionOK(e, b.Id, "unpause")
	opFail(e, opClaimDag(e, "w", "budget_cycle", 1)[0], "fifth")
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(b.Id).State)

	// Canceling a paused backfill clears the reason.
	lcActionOK(e, b.Id, "pause")
	c := lcActionOK(e, b.Id, "cancel")
	require.Nil(t, c.PauseReason)
	lcCheckInvariants(t, e.DB)
}

// A lease that expires at MAX_ATTEMPTS fails the run, and that failure spends the budget in
// the sweep's own transaction.
func TestBudgetPauseByLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxAttempts(1))
	e.PutDag("budget_lease", "@daily", "")
	b := e.CreateBackfill(backfillBody("budget_lease", day(1, 1), day(1, 5), "max_active_runs", 2, "max_failed_runs", 1))
	runs := lcClaimBody(e, map[string]any{"worker_id": "gone", "limit": 1, "lease_seconds": 10, "dag_id": "budget_lease"})
	require.Len(t, runs, 1)
	e.Clock.Advance(11 * time.Second)
	e.SweepOnce()
	require.Equal(t, api.DagRunStateFailed, lcGetRun(e, runs[0].DagId, runs[0].RunId).State)
	got := e.GetBackfill(b.Id)
	opRequirePaused(t, got, api.BackfillPauseReasonFailureBudget)
	require.EqualValues(t, 1, got.Progress.Failed)
	require.Empty(t, opClaimDag(e, "w", "budget_lease", 5))
	lcCheckInvariants(t, e.DB)
}

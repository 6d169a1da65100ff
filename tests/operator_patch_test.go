package tests

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// PATCH of max_active_runs while 8 workers claim and report: every claim obeys the limit in
// force when it committed, and runs above a lowered limit are not stopped.
func TestPatchMaxActiveRunsUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.InstallClaimAudit()
	e.PutDag("patch_live", "@hourly", "")
	b := e.CreateBackfill(backfillBody("patch_live", day(1, 1), day(1, 20), "max_active_runs", 6))

	var (
		stop   atomic.Bool
		errs   loadFailures
		claims atomic.Int64
	)
	working := startTogether(8, 8, func(i int) error {
		worker := fmt.Sprintf("pw%d", i)
		for !stop.Load() {
			c, err := try[api.ClaimResponse](e, http.StatusOK, http.MethodPost, claimPath, map[string]any{"worker_id": worker, "limit": 3, "dag_id": "patch_live"})
			if err != nil {
				return err
			}
			claims.Add(int64(len(c.Runs)))
			for _, r := range c.Runs {
				if _, err := try[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(r.DagId, r.RunId), map[string]any{"state": "success", "worker_id": worker}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	limits := []int{1, 5, 2, 9, 3, 1, 7, 4}
	for round := 0; round < 5; round++ {
		for _, n := range limits {
			res, err := e.do(http.MethodPatch, backfillPath(b.Id), map[string]any{"max_active_runs": n, "description": fmt.Sprintf("limit %d", n)})
			errs.expect("patch", res, err, map[int]string{200: "", 409: "backfill_not_active"})
		}
	}
	stop.Store(true)
	require.NoError(t, <-working)
	nErrs, errMsgs := errs.Summary()
	require.Zero(t, nErrs, "%v", errMsgs)

	var audited, over int
	require.NoError(t, e.DB.Get(&audited, `SELECT count(*) FROM invariants_claim_audit`))
	require.NoError(t, e.DB.Get(&over, `SELECT count(*) FROM invariants_claim_audit WHERE running > max_active_runs`))
	require.Positive(t, audited)
	require.Zero(t, over, "a claim committed above the max_active_runs in force")
	t.Logf("%d runs claimed, %d claim commits audited, none above the limit in force", claims.Load(), audited)

	// Lowering below what runs does not stop running runs; the next claim gets nothing.
	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 4})
	held := e.ClaimDag("held", "patch_live", 4)
	if len(held) == 4 {
		p := e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 1})
		require.EqualValues(t, 1, p.MaxActiveRuns)
		require.EqualValues(t, 4, p.Progress.Running)
		require.Empty(t, e.ClaimDag("more", "patch_live", 4))
	}
	checkInvariants(t, e.DB)
}

// PATCH is a merge patch of an active backfill; a terminal one is 409; bad values are 400.
func TestPatchBackfillMergeAndErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("patch_rules", day(1, 1), day(1, 3), "description", "first", "max_failed_runs", 2)

	p := e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 3})
	require.EqualValues(t, 3, p.MaxActiveRuns)
	require.Equal(t, "first", *p.Description, "a field left out keeps its value")
	require.EqualValues(t, 2, *p.MaxFailedRuns)

	// application/merge-patch+json is accepted too; null clears description.
	cleared := call[api.Backfill](e, http.StatusOK, http.MethodPatch, backfillPath(b.Id), `{"description": null}`, "Content-Type", "application/merge-patch+json")
	require.Nil(t, cleared.Description)
	require.EqualValues(t, 3, cleared.MaxActiveRuns)

	for _, bad := range []map[string]any{
		{"max_active_runs": 0}, {"max_active_runs": 1001}, {"max_active_runs": nil},
		{"max_failed_runs": 0}, {"state": "running"}, {"dag_run_conf": map[string]any{}},
	} {
		requireProblem(t, e.Do(http.MethodPatch, backfillPath(b.Id), bad), http.StatusBadRequest, "invalid_request")
	}
	requireProblem(t, e.Do(http.MethodPatch, backfillPath(999999), map[string]any{"max_active_runs": 2}), http.StatusNotFound, "backfill_not_found")

	// Canceling is still active: PATCH works. Terminal: 409.
	e.ActionOK(b.Id, "cancel")
	require.Equal(t, api.BackfillStateCanceled, e.GetBackfill(b.Id).State)
	requireProblem(t, e.Do(http.MethodPatch, backfillPath(b.Id), map[string]any{"max_active_runs": 2}), http.StatusConflict, "backfill_not_active")
}

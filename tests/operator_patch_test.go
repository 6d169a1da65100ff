package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/invariants"
	"github.com/stretchr/testify/require"
)

// PATCH of max_active_runs while 8 workers claim and report: every claim obeys the limit in
// force when it committed, and runs above a lowered limit are not stopped.
func TestPatchMaxActiveRunsUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, invariants.InstallClaimAudit(context.Background(), e.DB))
	e.PutDag("patch_live", "@hourly", "")
	b := e.CreateBackfill(backfillBody("patch_live", day(1, 1), day(1, 20), "max_active_runs", 6))

	var (
		stop   atomic.Bool
		wg     sync.WaitGroup
		errs   lcErrs
		claims atomic.Int64
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("pw%d", i)
			for !stop.Load() {
				res, err := e.do(http.MethodPost, lcClaimPath, map[string]any{"worker_id": worker, "limit": 3, "dag_id": "patch_live"})
				if errs.expect("claim", res, err, map[int]string{200: ""}) != http.StatusOK {
					return
				}
				var c api.ClaimResponse
				if err := json.Unmarshal(res.Body, &c); err != nil {
					errs.add("decode: %v", err)
					return
				}
				claims.Add(int64(len(c.Runs)))
				for _, r := range c.Runs {
					res, err := e.do(http.MethodPatch, lcRunPath(r.DagId, r.RunId), map[string]any{"state": "success", "worker_id": worker})
					errs.expect("report", res, err, map[int]string{200: ""})
				}
			}
		}()
	}
	limits := []int{1, 5, 2, 9, 3, 1, 7, 4}
	for round := 0; round < 5; round++ {
		for _, n := range limits {
			res, err := e.do(http.MethodPatch, lcBackfillPath(b.Id), map[string]any{"max_active_runs": n, "description": fmt.Sprintf("limit %d", n)})
			errs.expect("patch", res, err, map[int]string{200: "", 409: "backfill_not_active"})
		}
	}
	stop.Store(true)
	wg.Wait()
	require.Zero(t, errs.n, "%v", errs.msgs)

	var audited, over int
	require.NoError(t, e.DB.Get(&audited, `SELECT count(*) FROM invariants_claim_audit`))
	require.NoError(t, e.DB.Get(&over, `SELECT count(*) FROM invariants_claim_audit WHERE running > max_active_runs`))
	require.Positive(t, audited)
	require.Zero(t, over, "a claim committed above the max_active_runs in force")
	t.Logf("%d runs claimed, %d claim commits audited, none above the limit in force", claims.Load(), audited)

	// Lowering below what runs does not stop running runs; the next claim gets nothing.
	opPatch(e, b.Id, map[string]any{"max_active_runs": 4})
	held := opClaimDag(e, "held", "patch_live", 4)
	if len(held) == 4 {
		p := opPatch(e, b.Id, map[string]any{"max_active_runs": 1})
		require.EqualValues(t, 1, p.MaxActiveRuns)
		require.EqualValues(t, 4, p.Progress.Running)
		require.Empty(t, opClaimDag(e, "more", "patch_live", 4))
	}
	lcCheckInvariants(t, e.DB)
}

// PATCH is a merge patch of an active backfill; a terminal one is 409; bad values are 400.
func TestPatchBackfillMergeAndErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("patch_rules", "@daily", "")
	b := e.CreateBackfill(backfillBody("patch_rules", day(1, 1), day(1, 3), "description", "first", "max_failed_runs", 2))

	p := opPatch(e, b.Id, map[string]any{"max_active_runs": 3})
	require.EqualValues(t, 3, p.MaxActiveRuns)
	require.Equal(t, "first", *p.Description, "a field left out keeps its value")
	require.EqualValues(t, 2, *p.MaxFailedRuns)

	// application/merge-patch+json is accepted too; null clears description.
	res := e.Do(http.MethodPatch, lcBackfillPath(b.Id), `{"description": null}`, "Content-Type", "application/merge-patch+json")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var cleared api.Backfill
	res.Decode(t, &cleared)
	require.Nil(t, cleared.Description)
	require.EqualValues(t, 3, cleared.MaxActiveRuns)

	for _, bad := range []map[string]any{
		{"max_active_runs": 0}, {"max_active_runs": 1001}, {"max_active_runs": nil},
		{"max_failed_runs": 0}, {"state": "running"}, {"dag_run_conf": map[string]any{}},
	} {
		lcRequireProblem(t, e.Do(http.MethodPatch, lcBackfillPath(b.Id), bad), http.StatusBadRequest, "invalid_request")
	}
	lcRequireProblem(t, e.Do(http.MethodPatch, lcBackfillPath(999999), map[string]any{"max_active_runs": 2}), http.StatusNotFound, "backfill_not_found")

	// Canceling is still active: PATCH works. Terminal: 409.
	lcActionOK(e, b.Id, "cancel")
	require.Equal(t, api.BackfillStateCanceled, e.GetBackfill(b.Id).State)
	lcRequireProblem(t, e.Do(http.MethodPatch, lcBackfillPath(b.Id), map[string]any{"max_active_runs": 2}), http.StatusConflict, "backfill_not_active")
}

package tests

// Helpers of the operator tests (failure budget, PATCH, retry, If-Match, release, DAG
// delete). Every name starts with op.

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func opRetryPath(id int64) string   { return fmt.Sprintf("/api/v1/backfills/%d/retry", id) }
func opReleasePath(id int64) string { return fmt.Sprintf("/api/v1/runs/%d/release", id) }

// opPatch PATCHes a backfill's settings and requires 200.
func opPatch(e *env, id int64, body map[string]any) api.Backfill {
	e.t.Helper()
	res := e.Do(http.MethodPatch, lcBackfillPath(id), body)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var b api.Backfill
	res.Decode(e.t, &b)
	return b
}

// opFail reports a run failed as its worker, with a note.
func opFail(e *env, run api.DagRun, note string) api.DagRun {
	e.t.Helper()
	res := e.Do(http.MethodPatch, lcRunPath(run.DagId, run.RunId),
		map[string]any{"state": "failed", "worker_id": *run.WorkerId, "note": note})
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var out api.DagRun
	res.Decode(e.t, &out)
	return out
}

// opClaimDag claims up to limit runs of one DAG.
func opClaimDag(e *env, worker, dagID string, limit int) []api.DagRun {
	e.t.Helper()
	return lcClaimBody(e, map[string]any{"worker_id": worker, "limit": limit, "dag_id": dagID})
}

// opRequirePaused requires the backfill to be paused for this reason.
func opRequirePaused(t testing.TB, b api.Backfill, reason api.BackfillPauseReason) {
	t.Helper()
	require.Equal(t, api.BackfillStatePaused, b.State)
	require.True(t, b.IsPaused)
	require.NotNil(t, b.PauseReason)
	require.Equal(t, reason, *b.PauseReason)
}

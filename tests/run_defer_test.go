package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// Defer reports a run deferred by its worker for secs seconds and requires 200.
func (e *env) Defer(run api.DagRun, secs int, note string) api.DagRun {
	e.t.Helper()
	return call[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(run.DagId, run.RunId),
		map[string]any{"state": "deferred", "worker_id": *run.WorkerId, "retry_after_seconds": secs, "note": note})
}

// A deferred run goes back to queued with its attempt, is not claimable until its
// retry_after has passed by the database's clock (not a microsecond before), and is then
// claimed again as the same attempt; the deferral is counted per DAG.
func TestDeferredRunKeepsItsAttemptAndWaitsOutItsRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "defer_dag"
	e.PutDag(dag, "@daily", "")
	e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 1)))
	run := e.ClaimN(1, "w1", 1)[0]
	require.EqualValues(t, 1, run.Attempt)

	t0 := e.Clock.Now()
	got := e.Defer(run, 120, "warehouse: 429")
	require.Equal(t, api.DagRunStateQueued, got.State)
	require.EqualValues(t, 1, got.Attempt, "a deferral is not a failed attempt")
	require.Nil(t, got.WorkerId)
	require.Nil(t, got.LeaseExpiresAt)
	require.Equal(t, "warehouse: 429", *got.Note)
	requireInstant(t, t0.Add(120*time.Second), got.NotBefore, "not_before")

	require.Empty(t, e.Claim("w2", 5), "a deferred run is not claimable before its time")
	e.Clock.Advance(120*time.Second - time.Microsecond)
	require.Empty(t, e.Claim("w2", 5), "nor a microsecond before it")
	e.Clock.Advance(time.Microsecond)
	again := e.ClaimN(1, "w2", 5)[0]
	require.Equal(t, run.Id, again.Id)
	require.EqualValues(t, 1, again.Attempt, "the deferral charged no attempt")
	require.Nil(t, again.NotBefore)

	scrape := string(e.Do(http.MethodGet, "/metrics", nil).Body)
	require.Contains(t, scrape, `backfill_runs_deferred_total{dag_id="defer_dag"} 1`)
	checkInvariants(t, e.DB)
}

// A manual run is deferred like a backfill's, and a DAG whose only queued run waits is not
// claimable for it: the claim answers at once instead of trying again for its race budget.
func TestDeferredManualRunIsNotClaimableUntilItsTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "defer_manual"
	e.PutDag(dag, "@daily", "")
	call[api.DagRun](e, http.StatusCreated, http.MethodPost, "/api/v1/dags/"+dag+"/runs",
		map[string]any{"logical_date": "2024-01-01T00:00:00Z"})
	run := e.ClaimN(1, "w1", 1)[0]
	e.Defer(run, 30, "busy")
	// A claim that took the deferred run for one another claim holds would try again until
	// its race budget (repo's claimRaceBudget, 500 ms) ran out after its first statement, so
	// it could not answer sooner; an answer at once can take a few hundred milliseconds on a
	// loaded machine under -race (300.2 ms in one CI run), so the budget is the bound.
	start := time.Now()
	require.Empty(t, e.ClaimDag("w1", dag, 1))
	require.Less(t, time.Since(start), 500*time.Millisecond, "a deferred run is not a run another claim holds")
	e.Clock.Advance(30 * time.Second)
	require.Equal(t, run.Id, e.ClaimN(1, "w1", 1)[0].Id)
}

// retry_after_seconds must come with deferred, within 1..86400, and only with it: 422
// invalid_deferral, nothing changed.
func TestDeferralWithoutAValidRetryAfterIs422(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "defer_invalid"
	e.PutDag(dag, "@daily", "")
	e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 1)))
	run := e.ClaimN(1, "w1", 1)[0]
	for _, body := range []map[string]any{
		{"state": "deferred", "worker_id": "w1"},
		{"state": "deferred", "worker_id": "w1", "retry_after_seconds": 0},
		{"state": "deferred", "worker_id": "w1", "retry_after_seconds": 86401},
		{"state": "deferred", "worker_id": "w1", "retry_after_seconds": -5},
		{"state": "success", "worker_id": "w1", "retry_after_seconds": 10},
		{"state": "failed", "retry_after_seconds": 10},
	} {
		res := e.Do(http.MethodPatch, runPath(run.DagId, run.RunId), body)
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, "%v: %s", body, res.Body)
		require.Contains(t, string(res.Body), `"code":"invalid_deferral"`)
		require.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json"))
	}
	require.Equal(t, "running", clockRunRow(t, e, run.Id).State)
	// The longest deferral is accepted.
	require.EqualValues(t, 1, e.Defer(run, 86400, "").Attempt)
}

// A deferral of a run whose backfill is canceling cancels it, as a release does: a queued
// run would keep the backfill from ever finishing.
func TestDeferralOfARunOfACancelingBackfillCancelsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "defer_cancel"
	e.PutDag(dag, "@daily", "")
	bf := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 1)))
	run := e.ClaimN(1, "w1", 1)[0]
	call[api.Backfill](e, http.StatusOK, http.MethodPut, backfillPath(bf.Id)+"/cancel", nil)
	got := e.Defer(run, 60, "")
	require.Equal(t, api.DagRunStateCanceled, got.State)
	require.Nil(t, got.NotBefore)
	checkInvariants(t, e.DB)
}

package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// finishWithFailures runs a backfill of days 1..n of January to its end: the runs at the
// given (1-based) days fail or are canceled, the rest succeed; the sweep then finalizes it.
func finishWithFailures(e *env, dagID string, n int, failed, canceled map[int]bool) api.Backfill {
	e.t.Helper()
	b := e.CreateBackfill(backfillBody(dagID, day(1, 1), day(1, n), "max_active_runs", n, "max_failed_runs", n+1))
	for _, r := range e.ClaimDag("w", dagID, n) {
		switch d := r.LogicalDate.Day(); {
		case failed[d]:
			e.ReportFailed(r, fmt.Sprintf("day %d broke", d))
		case canceled[d]:
			e.Report(r, "canceled")
		default:
			e.Report(r, "success")
		}
	}
	e.SweepOnce()
	b = e.GetBackfill(b.Id)
	require.Contains(e.t, []api.BackfillState{api.BackfillStateFailed, api.BackfillStateSucceeded}, b.State)
	return b
}

// A retry creates a backfill of the parent's failed and canceled slots only, decided with
// reprocess_behavior failed, with the parent's settings unless the body overrides them.
func TestRetryCreatesBackfillOfFailedSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("retry", "@daily", "")
	parent := finishWithFailures(e, "retry", 6, map[int]bool{2: true, 5: true}, map[int]bool{4: true})
	require.Equal(t, api.BackfillStateFailed, parent.State)

	res := e.Do(http.MethodPost, retryPath(parent.Id), map[string]any{"max_active_runs": 2, "max_failed_runs": nil, "dag_run_conf": map[string]any{"again": true}},
		"Idempotency-Key", "retry-1")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, fmt.Sprintf("/api/v1/backfills/%d", mustID(t, res)), res.Header.Get("Location"))
	var child api.Backfill
	res.Decode(t, &child)
	require.Equal(t, parent.Id, *child.ParentBackfillId)
	require.Nil(t, parent.ParentBackfillId)
	require.Equal(t, api.ReprocessBehaviorFailed, child.ReprocessBehavior)
	require.EqualValues(t, 2, child.MaxActiveRuns)
	require.Nil(t, child.MaxFailedRuns, "null in the body removes the parent's budget")
	requireConf(t, map[string]any{"again": true}, child.DagRunConf)
	require.EqualValues(t, 3, child.Progress.Total)
	require.EqualValues(t, 3, child.Progress.Queued)
	require.NotNil(t, child.PlanHash)
	var days []int
	for _, s := range e.Slots(child.Id) {
		days = append(days, s.LogicalDate.Day())
	}
	require.Equal(t, []int{2, 4, 5}, days)

	// The parent's record does not change: its slots keep the states they ended with.
	after := e.GetBackfill(parent.Id)
	require.Equal(t, parent.Progress, after.Progress)
	require.Equal(t, parent.State, after.State)

	// The same key replays; a different body under it is 422.
	res = e.Do(http.MethodPost, retryPath(parent.Id), map[string]any{"max_active_runs": 2, "max_failed_runs": nil, "dag_run_conf": map[string]any{"again": true}},
		"Idempotency-Key", "retry-1")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	require.Equal(t, child.Id, mustID(t, res))
	requireProblem(t, e.Do(http.MethodPost, retryPath(parent.Id), map[string]any{"max_active_runs": 3}, "Idempotency-Key", "retry-1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")

	// While the child is active: the child is not terminal (409), the parent's DAG is busy (409).
	requireProblem(t, e.Do(http.MethodPost, retryPath(child.Id), nil), http.StatusConflict, "backfill_not_terminal")
	p := requireProblem(t, e.Do(http.MethodPost, retryPath(parent.Id), nil), http.StatusConflict, "backfill_already_running")
	require.Equal(t, child.Id, *p.ActiveBackfillId)
	requireProblem(t, e.Do(http.MethodPost, retryPath(424242), nil), http.StatusNotFound, "backfill_not_found")
	requireProblem(t, e.Do(http.MethodPost, retryPath(parent.Id), map[string]any{"reprocess_behavior": "none"}), http.StatusBadRequest, "invalid_request")

	// Day 2 succeeds this time, 4 and 5 fail again. A retry of the parent now skips day 2
	// (already exists); a retry of the child has only 4 and 5.
	for range 2 { // max_active_runs 2: two rounds of claims
		for _, r := range e.ClaimDag("w", "retry", 3) {
			if r.LogicalDate.Day() == 2 {
				e.Report(r, "success")
			} else {
				e.ReportFailed(r, "still broken")
			}
		}
	}
	e.SweepOnce()
	require.Equal(t, api.BackfillStateFailed, e.GetBackfill(child.Id).State)
	again := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(parent.Id), nil)
	require.EqualValues(t, 3, again.Progress.Total)
	require.EqualValues(t, 1, again.Progress.Skipped)
	require.EqualValues(t, 7, *again.MaxFailedRuns, "the parent's budget by default")
	slots := e.Slots(again.Id)
	require.Equal(t, 2, slots[0].LogicalDate.Day())
	require.Equal(t, "already exists", *slots[0].ExceptionReason)
	e.ActionOK(again.Id, "cancel")
	e.SweepOnce()
	checkInvariants(t, e.DB)

	// A backfill with no failed or canceled slot has nothing to retry.
	e.PutDag("retry_ok", "@daily", "")
	ok := finishWithFailures(e, "retry_ok", 2, nil, nil)
	require.Equal(t, api.BackfillStateSucceeded, ok.State)
	requireProblem(t, e.Do(http.MethodPost, retryPath(ok.Id), nil), http.StatusUnprocessableEntity, "no_runs_to_create")
}

// mustID reads the id of a backfill answer.
func mustID(t testing.TB, res *response) int64 {
	t.Helper()
	var b api.Backfill
	res.Decode(t, &b)
	return b.Id
}

// A retry and a creation race for the same DAG: exactly one wins, the other is 409
// backfill_already_running naming the winner.
func TestRetryRacingCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("retry_race", "@daily", "")
	parent := finishWithFailures(e, "retry_race", 4, map[int]bool{1: true, 3: true}, nil)
	outcomes := map[string]int{}
	for round := range 10 {
		answers := e.DoTogether(
			request{Method: http.MethodPost, Path: retryPath(parent.Id)},
			createRequest(backfillBody("retry_race", day(3, 1+round), day(3, 2+round))))
		retry, create := answers[0], answers[1]
		var winner, loser *response
		switch {
		case retry.Status == http.StatusCreated && create.Status == http.StatusConflict:
			winner, loser = retry, create
			outcomes["retry won"]++
		case create.Status == http.StatusCreated && retry.Status == http.StatusConflict:
			winner, loser = create, retry
			outcomes["create won"]++
		default:
			t.Fatalf("round %d: retry %d %s, create %d %s", round, retry.Status, retry.Body, create.Status, create.Body)
		}
		id := mustID(t, winner)
		p := requireProblem(t, loser, http.StatusConflict, "backfill_already_running")
		require.Equal(t, id, *p.ActiveBackfillId)
		e.ActionOK(id, "cancel")
		e.SweepOnce()
	}
	t.Logf("outcomes: %v", outcomes)
	checkInvariants(t, e.DB)
}

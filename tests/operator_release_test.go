package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// A release hands the run back queued with the same attempt; the next claim gets it again
// with that attempt. Only the lease holder may release.
func TestReleaseThenReclaimKeepsAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxAttempts(3))
	b := e.DailyBackfill("release", day(1, 1), day(1, 2), "max_active_runs", 1)

	// Put the first run at attempt 2 through one expired lease.
	first := e.ClaimWith(map[string]any{"worker_id": "w1", "lease_seconds": 10, "dag_id": "release"})[0]
	e.Clock.Advance(11 * time.Second)
	e.SweepOnce()
	again := e.ClaimDag("w1", "release", 1)[0]
	require.Equal(t, first.Id, again.Id)
	require.EqualValues(t, 2, again.Attempt)

	requireProblem(t, e.Do(http.MethodPost, releasePath(again.Id), map[string]any{"worker_id": "other"}), http.StatusConflict, "lease_lost")
	requireProblem(t, e.Do(http.MethodPost, releasePath(987654), map[string]any{"worker_id": "w1"}), http.StatusNotFound, "run_not_found")
	requireProblem(t, e.Do(http.MethodPost, releasePath(again.Id), map[string]any{}), http.StatusBadRequest, "invalid_request")

	res := e.Do(http.MethodPost, releasePath(again.Id), map[string]any{"worker_id": "w1"})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var released api.DagRun
	res.Decode(t, &released)
	require.Equal(t, api.DagRunStateQueued, released.State)
	require.EqualValues(t, 2, released.Attempt)
	require.Nil(t, released.WorkerId)
	require.Nil(t, released.LeaseExpiresAt)
	require.EqualValues(t, 0, requireProgressExact(t, e, b.Id).Progress.Running)

	// Released twice: the lease is gone.
	requireProblem(t, e.Do(http.MethodPost, releasePath(again.Id), map[string]any{"worker_id": "w1"}), http.StatusConflict, "lease_lost")

	// The next claim (max_active_runs 1: the released slot is free again) gets it, same attempt.
	reclaimed := e.ClaimDag("w2", "release", 1)
	require.Len(t, reclaimed, 1)
	require.Equal(t, again.Id, reclaimed[0].Id)
	require.EqualValues(t, 2, reclaimed[0].Attempt)
	require.Equal(t, "w2", *reclaimed[0].WorkerId)
	requireProgressExact(t, e, b.Id)

	// A release while the backfill is canceling cancels the run, as an expired lease would.
	e.ActionOK(b.Id, "cancel")
	res = e.Do(http.MethodPost, releasePath(again.Id), map[string]any{"worker_id": "w2"})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	res.Decode(t, &released)
	require.Equal(t, api.DagRunStateCanceled, released.State)
	e.SweepOnce()
	require.Equal(t, api.BackfillStateCanceled, e.GetBackfill(b.Id).State)
	checkInvariants(t, e.DB)
}

// A report's note shows on the run; a note over 4,096 characters is 400; a new claim of the
// run (here after a retry reprocessed it) clears it.
func TestRunNoteShownAndClearedByNextClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("notes", day(1, 1), day(1, 1))
	run := e.ClaimDag("w", "notes", 1)[0]
	requireProblem(t, e.Do(http.MethodPatch, runPath(run.DagId, run.RunId),
		map[string]any{"state": "failed", "worker_id": "w", "note": strings.Repeat("x", 4097)}), http.StatusBadRequest, "invalid_request")
	failed := e.ReportFailed(run, "disk full on "+strings.Repeat("é", 10))
	require.Equal(t, "disk full on "+strings.Repeat("é", 10), *failed.Note)
	require.Nil(t, e.GetRun("notes", run.RunId).LeaseExpiresAt)
	e.SweepOnce()
	require.Equal(t, api.BackfillStateFailed, e.GetBackfill(b.Id).State)

	res := e.Do(http.MethodPost, retryPath(b.Id), nil)
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	queued := e.GetRun("notes", run.RunId)
	require.Equal(t, api.DagRunStateQueued, queued.State)
	require.NotNil(t, queued.Note, "the note stays until the run is claimed again")
	claimed := e.ClaimDag("w", "notes", 1)
	require.Len(t, claimed, 1)
	require.Nil(t, claimed[0].Note)
	require.Nil(t, e.GetRun("notes", run.RunId).Note)

	// The parent's slot keeps the attempt and note its run had when the retry took it over.
	slot := e.Slots(b.Id)[0]
	require.Equal(t, api.DagRunStateFailed, *slot.State)
	require.EqualValues(t, 1, *slot.Attempt)
	require.Equal(t, "disk full on "+strings.Repeat("é", 10), *slot.Note)
}

package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// A retried slot's run starts at the attempt after its last, so a program can tell it ran
// before; MAX_ATTEMPTS counts the attempts of the retry's own go at it, not the ones before.
func TestRetriedSlotKeepsCountingAttemptsWithinMaxAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxAttempts(2))
	e.PutDag("attempts", "@daily", "")
	parent := finishWithFailures(e, "attempts", 2, map[int]bool{2: true}, nil)
	require.Equal(t, api.BackfillStateFailed, parent.State)

	child := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(parent.Id), nil)
	runs := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "lease_seconds": 30, "dag_id": "attempts"})
	require.Equal(t, child.Id, *runs[0].BackfillId)
	require.EqualValues(t, 2, runs[0].Attempt, "the retried slot ran once before")

	// One expired lease in this go: under MAX_ATTEMPTS 2 the run goes back, at attempt 3.
	e.Clock.Advance(31 * time.Second)
	e.SweepOnce()
	requireRequeued(t, e, runs[0].Id, 3)
	again := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "lease_seconds": 30, "dag_id": "attempts"})
	require.EqualValues(t, 3, again[0].Attempt)
	// The second expiry of this go reaches MAX_ATTEMPTS: the run fails.
	e.Clock.Advance(31 * time.Second)
	e.SweepOnce()
	r := runByID(t, e.DB, runs[0].Id)
	require.Equal(t, "failed", r.State)
	require.Equal(t, 3, r.Attempt)
	checkInvariants(t, e.DB)
}

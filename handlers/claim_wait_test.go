package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// emptyClaims answers every claim at once with nothing, and every backfill read at once.
type emptyClaims struct {
	handlers.Store
	claims atomic.Int64
}

func (e *emptyClaims) RunClaim(context.Context, repo.RunClaimParams) ([]repo.Run, bool, error) {
	e.claims.Add(1)
	return nil, false, nil
}

func (e *emptyClaims) BackfillGet(_ context.Context, id int64) (repo.Backfill, error) {
	return repo.Backfill{ID: id, DagID: "d", State: "running"}, nil
}

func (e *emptyClaims) BackfillGetWithETA(ctx context.Context, id int64) (repo.Backfill, *float64, error) {
	b, err := e.BackfillGet(ctx, id)
	return b, nil, err
}

// Claims waiting for work hold no admission slot: twelve of them wait at once behind four
// claim slots, none is shed, and a read is served at once meanwhile. Each claims again on
// every poll while it waits.
func TestWaitingClaimsHoldNoAdmissionSlot(t *testing.T) {
	t.Parallel()
	store := &emptyClaims{}
	h := admitting(t, store, handlers.Admission{MaxInFlight: 4, LeaseMaxInFlight: 1, Wait: 50 * time.Millisecond, LongWait: 50 * time.Millisecond})
	const n = 12
	answers := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			answers[i] = serveOne(t, h, "POST", "/api/v1/runs/claim", `{"worker_id":"w","wait_seconds":2}`)
		})
	}
	require.Eventually(t, func() bool { return store.claims.Load() >= n }, 5*time.Second, 5*time.Millisecond)
	got := serveOne(t, h, "GET", "/api/v1/backfills/1", "")
	require.Equal(t, http.StatusOK, got.Code, "a read is admitted while the claims wait")
	require.Less(t, time.Since(start), time.Second)
	wg.Wait()
	for i, a := range answers {
		require.Equal(t, http.StatusOK, a.Code, "claim %d: %s", i, a.Body.String())
		require.JSONEq(t, `{"runs":[]}`, a.Body.String())
	}
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second)
	require.GreaterOrEqual(t, store.claims.Load(), int64(2*n), "each claimed again on its poll")
}

package tests

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// PutPoolRate creates or replaces a pool with a pace and requires want.
func (e *env) PutPoolRate(name string, slots, runs int, per string, want int) api.Pool {
	e.t.Helper()
	return call[api.Pool](e, want, http.MethodPut, poolPath(name),
		map[string]any{"slots": slots, "rate": map[string]any{"runs": runs, "per": per}})
}

// A pool paced at 5 a minute starts exactly 5 runs, then none until the first of them is a
// minute old (not a microsecond before), and GET says when that is; then 5 again.
func TestPacedPoolStartsExactlyFiveRunsAMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.PutPoolRate("api", 100, 5, "minute", http.StatusCreated)
	require.Equal(t, &api.PoolRate{Runs: 5, Per: api.PoolRatePerMinute}, p.Rate)
	require.Nil(t, p.NextStartAt)
	e.DailyBackfill("paced", day(1, 1), day(1, 20), "max_active_runs", 20, "pool", "api")

	t0 := e.Clock.Now()
	require.Len(t, e.Claim("w1", 3), 3)
	e.Clock.Advance(10 * time.Second)
	require.Len(t, e.Claim("w1", 10), 2, "a burst up to the pace, and no more")
	require.Empty(t, e.Claim("w2", 10))
	got := e.GetPool("api")
	requireInstant(t, t0.Add(time.Minute), got.NextStartAt, "next_start_at: when the first start leaves the window")
	require.EqualValues(t, 5, got.Running)
	require.Contains(t, string(e.Do(http.MethodGet, "/metrics", nil).Body), `backfill_pool_paced_out{pool="api"} 1`)

	e.Clock.Advance(50*time.Second - time.Microsecond)
	require.Empty(t, e.Claim("w2", 10), "a microsecond before the window moves")
	e.Clock.Advance(time.Microsecond)
	require.Len(t, e.Claim("w2", 10), 3, "the three starts of t0 left the window")
	requireInstant(t, t0.Add(70*time.Second), e.GetPool("api").NextStartAt)
	e.Clock.Advance(10 * time.Second)
	require.Len(t, e.Claim("w2", 10), 2)

	// Removing the pace frees the pool at once; the list shows it too.
	p = call[api.Pool](e, http.StatusOK, http.MethodPut, poolPath("api"), map[string]any{"slots": 100, "rate": nil})
	require.Nil(t, p.Rate)
	require.Nil(t, p.NextStartAt)
	require.Len(t, e.Claim("w3", 10), 10)
	require.Contains(t, string(e.Do(http.MethodGet, "/metrics", nil).Body), `backfill_pool_paced_out{pool="api"} 0`)
	checkInvariants(t, e.DB)
}

// Bad paces are 400 invalid_request, as the spec's ranges and enums say.
func TestPoolRateOutOfRangeIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, rate := range []any{
		map[string]any{"runs": 0, "per": "minute"},
		map[string]any{"runs": 1001, "per": "minute"},
		map[string]any{"runs": 5, "per": "day"},
		map[string]any{"runs": 5},
		map[string]any{"runs": 5, "per": "minute", "burst": 2},
		"5/minute",
	} {
		res := e.Do(http.MethodPut, poolPath("bad"), map[string]any{"slots": 1, "rate": rate})
		require.Equal(t, http.StatusBadRequest, res.Status, "%v: %s", rate, res.Body)
		require.Contains(t, string(res.Body), `"code":"invalid_request"`)
	}
}

// 16 claimers, half on each of two replicas, released together round after round while the
// database's clock moves by uneven steps: each round starts exactly what the sliding window
// leaves (5 a minute, counted from the test's own record of starts), and the oracle checks
// every claim's commit: in no window of a minute more than 5 starts (invariant (i)).
func TestPoolPaceHoldsUnderConcurrentClaimsOnTwoReplicas(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.InstallClaimAudit()
	a.PutPoolRate("paced_api", 50, 5, "minute", http.StatusCreated)
	for i := range 3 {
		a.DailyBackfill(fmt.Sprintf("paced_dag%d", i), day(1, 1), day(1, 12), "max_active_runs", 12, "pool", "paced_api")
	}
	replicas := []*env{a, b}
	var starts []time.Time
	queued := 36
	t0 := a.Clock.Now()
	steps := []time.Duration{0, 7 * time.Second, 13 * time.Second, 40 * time.Second, time.Second,
		59 * time.Second, 3 * time.Second, 61 * time.Second, 0, 30 * time.Second, 30 * time.Second}
	for round, step := range steps {
		a.Clock.Advance(step)
		now := a.Clock.Now()
		inWindow := 0
		for _, s := range starts {
			if s.After(now.Add(-time.Minute)) {
				inWindow++
			}
		}
		want := min(5-inWindow, queued)
		var (
			mu  sync.Mutex
			got []api.DagRun
		)
		releaseTogether(t, 16, func(i int) error {
			c, err := try[api.ClaimResponse](replicas[i%2], http.StatusOK, http.MethodPost, claimPath,
				map[string]any{"worker_id": fmt.Sprintf("w%d", i), "limit": 2})
			mu.Lock()
			defer mu.Unlock()
			got = append(got, c.Runs...)
			return err
		})
		require.Len(t, got, want, "round %d at +%s: %d starts in the window", round, now.Sub(t0), inWindow)
		for _, r := range got {
			starts = append(starts, *r.StartDate)
			replicas[round%2].Report(r, "success")
		}
		queued -= len(got)
	}
	require.Len(t, starts, 25)
	checkInvariants(t, a.DB)
}

package tests

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func poolPath(name string) string { return "/api/v1/pools/" + name }

// PutPool creates or replaces a pool and requires want (201 or 200).
func (e *env) PutPool(name string, slots, want int) api.Pool {
	e.t.Helper()
	return call[api.Pool](e, want, http.MethodPut, poolPath(name), map[string]any{"slots": slots})
}

func (e *env) GetPool(name string) api.Pool {
	e.t.Helper()
	return call[api.Pool](e, http.StatusOK, http.MethodGet, poolPath(name), nil)
}

// 16 claimers, half on each of two replicas, against three backfills sharing a pool of two:
// every claim's commit is audited (invariants (c) and (h): the pool's running runs, counted
// afresh, never above its slots), round after round until every run has succeeded, and each
// round fills the pool again.
func TestPoolHoldsSlotsUnderConcurrentClaimsOnTwoReplicas(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.InstallClaimAudit()
	a.PutPool("warehouse", 2, http.StatusCreated)
	const perBackfill = 6
	for i := range 3 {
		bf := a.DailyBackfill(fmt.Sprintf("pool_dag%d", i), day(1, 1), day(1, perBackfill),
			"max_active_runs", 5, "pool", "warehouse")
		require.Equal(t, "warehouse", *bf.Pool)
	}
	require.EqualValues(t, 3*perBackfill, a.GetPool("warehouse").Queued)

	replicas := []*env{a, b}
	var running []api.DagRun
	queued, succeeded := 3*perBackfill, 0
	for round := 0; succeeded < 3*perBackfill; round++ {
		want := min(2-len(running), queued)
		var (
			mu  sync.Mutex
			got []api.DagRun
		)
		releaseTogether(t, 16, func(i int) error {
			c, err := try[api.ClaimResponse](replicas[i%2], http.StatusOK, http.MethodPost, claimPath,
				map[string]any{"worker_id": fmt.Sprintf("w%d", i), "limit": 3})
			mu.Lock()
			defer mu.Unlock()
			got = append(got, c.Runs...)
			return err
		})
		require.Len(t, got, want, "round %d: the claims fill the pool, and no more", round)
		running = append(running, got...)
		queued -= len(got)
		requireDistinctRuns(t, running)
		require.EqualValues(t, len(running), a.GetPool("warehouse").Running, "round %d", round)
		checkInvariants(t, a.DB)
		// One run ends per round (all of them once nothing is queued), so each next round has
		// exactly one slot to fill.
		ending := 1
		if queued == 0 {
			ending = len(running)
		}
		for _, r := range running[:ending] {
			replicas[round%2].Report(r, "success")
			succeeded++
		}
		running = running[ending:]
	}
	pool := a.GetPool("warehouse")
	require.Zero(t, pool.Running)
	require.Zero(t, pool.Queued)
	var audited int
	require.NoError(t, a.DB.Get(&audited, `SELECT count(*) FROM invariants_pool_audit`))
	require.Equal(t, 3*perBackfill, audited, "every claim of a pooled run was audited")
	checkInvariants(t, a.DB)
}

// Lowering a pool's slots below its running runs stops none of them: claims find no room in
// the pool until enough have ended, and other work is still claimed meanwhile.
func TestPoolLoweringSlotsStopsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutPool("shrink", 3, http.StatusCreated)
	bf := e.DailyBackfill("pool_shrink", day(2, 1), day(2, 6), "max_active_runs", 6, "pool", "shrink")
	runs := e.Claim("w", 10)
	require.Len(t, runs, 3, "the pool's slots bound the claim")

	lowered := e.PutPool("shrink", 1, http.StatusOK)
	require.EqualValues(t, 1, lowered.Slots)
	require.EqualValues(t, 3, lowered.Running, "lowering slots stops nothing")
	require.EqualValues(t, 3, runStates(t, e.DB, bf.Id)["running"])
	require.Empty(t, e.Claim("w", 10), "a full pool is skipped")
	metrics := string(e.Do(http.MethodGet, "/metrics", nil).Body)
	require.Contains(t, metrics, `backfill_pool_slots{pool="shrink"} 1`)
	require.Contains(t, metrics, `backfill_pool_running{pool="shrink"} 3`)
	require.Contains(t, metrics, `backfill_pool_queued{pool="shrink"} 3`)

	// Work outside the pool is still claimed past the full pool.
	e.DailyBackfill("pool_shrink_free", day(2, 1), day(2, 1))
	free := e.Claim("w", 10)
	require.Len(t, free, 1)
	require.Equal(t, "pool_shrink_free", free[0].DagId)

	e.Report(runs[0], "success")
	e.Report(runs[1], "success")
	require.Empty(t, e.Claim("w", 10), "one still runs: the pool of one is full")
	e.Report(runs[2], "success")
	require.Len(t, e.Claim("w", 10), 1)
	checkInvariants(t, e.DB)
}

// A pool named by an active backfill or an unfinished manual run cannot be deleted; unknown
// pools are refused where they are named; a manual run is claimed in its own pool.
func TestPoolInUseAndUnknownPools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pool_use", "@daily", "UTC")
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/backfills"},
		{http.MethodPost, "/api/v1/dags/pool_use/runs"},
	} {
		body := backfillBody("pool_use", day(3, 1), day(3, 2), "pool", "nope")
		if c.path != "/api/v1/backfills" {
			body = map[string]any{"logical_date": ts(day(3, 1)), "pool": "nope"}
		}
		p := call[api.Problem](e, http.StatusUnprocessableEntity, c.method, c.path, body)
		require.Equal(t, api.ProblemCode("pool_not_found"), p.Code, c.path)
	}
	require.Equal(t, api.ProblemCode("pool_not_found"),
		call[api.Problem](e, http.StatusNotFound, http.MethodGet, poolPath("nope"), nil).Code)

	e.PutPool("busy", 1, http.StatusCreated)
	bf := e.DailyBackfill("pool_use", day(3, 1), day(3, 2), "pool", "busy")
	p := call[api.Problem](e, http.StatusConflict, http.MethodDelete, poolPath("busy"), nil)
	require.Equal(t, api.ProblemCode("pool_in_use"), p.Code)

	// PATCH moves the backfill out of the pool; then a manual run holds it.
	moved := e.PatchBackfill(bf.Id, map[string]any{"pool": nil})
	require.Nil(t, moved.Pool)
	require.Zero(t, e.GetPool("busy").Queued)
	manual := call[api.DagRun](e, http.StatusCreated, http.MethodPost, "/api/v1/dags/pool_use/runs",
		map[string]any{"logical_date": ts(day(4, 1)), "pool": "busy"})
	require.EqualValues(t, 1, e.GetPool("busy").Queued)
	require.Equal(t, api.ProblemCode("pool_in_use"),
		call[api.Problem](e, http.StatusConflict, http.MethodDelete, poolPath("busy"), nil).Code)
	require.Empty(t, e.ClaimWith(map[string]any{"worker_id": "w", "limit": 5, "pool": "busy", "dag_id": "pool_other"}),
		"both filters hold")
	got := e.ClaimWith(map[string]any{"worker_id": "w", "limit": 5, "pool": "busy", "dag_id": "pool_use"})
	require.Len(t, got, 1, "a claim filtered by pool takes only the pool's runs")
	require.Equal(t, manual.Id, got[0].Id)
	require.EqualValues(t, 1, e.GetPool("busy").Running)
	e.Report(got[0], "success")

	list := call[api.PoolCollection](e, http.StatusOK, http.MethodGet, "/api/v1/pools", nil)
	require.EqualValues(t, 1, list.TotalEntries)
	res, err := e.do(http.MethodDelete, poolPath("busy"), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, res.Status, "nothing unfinished names the pool")
	call[api.Problem](e, http.StatusNotFound, http.MethodGet, poolPath("busy"), nil)
	checkInvariants(t, e.DB)
}

// A backfill's pool is one of its settings: moving it writes one backfill.updated whose
// snapshot is GET's answer, and a PATCH to the pool it already has writes nothing.
func TestPatchOfPoolWritesUpdatedEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pool_ev", "@daily", "UTC")
	e.PutPool("ev_a", 2, http.StatusCreated)
	e.PutPool("ev_b", 2, http.StatusCreated)
	bf := e.DailyBackfill("pool_ev", day(3, 1), day(3, 2), "pool", "ev_a")
	moved := e.PatchBackfill(bf.Id, map[string]any{"pool": "ev_b"})
	require.NotNil(t, moved.Pool)
	require.Equal(t, "ev_b", *moved.Pool)
	evs := evOf(e, bf.Id)
	require.Equal(t, []string{"backfill.created", "backfill.updated"}, evTypes(evs))
	evRequireSnapshot(t, evs[1], evGetRaw(e, bf.Id))

	e.PatchBackfill(bf.Id, map[string]any{"pool": "ev_b"})
	require.Len(t, evOf(e, bf.Id), 2, "a PATCH that changes nothing writes no event")
	checkInvariants(t, e.DB)
}

// A pool's deletion leaves the finished backfills that ran in it as they were: the same
// record, pool included, and no event after their terminal one (a foreign key's SET NULL
// would rewrite them, and the settings trigger would write a backfill.updated).
func TestPoolDeleteLeavesFinishedBackfillsUntouched(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("pool_gone", "@daily", "UTC")
	e.PutPool("gone", 2, http.StatusCreated)
	bf := e.DailyBackfill("pool_gone", day(3, 1), day(3, 2), "pool", "gone")
	e.ActionOK(bf.Id, "cancel")
	before := evTypes(evOf(e, bf.Id))
	require.Equal(t, "backfill.canceled", before[len(before)-1])
	record := evGetRaw(e, bf.Id)

	res, err := e.do(http.MethodDelete, poolPath("gone"), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, res.Status, "body: %s", res.Body)
	require.JSONEq(t, string(record), string(evGetRaw(e, bf.Id)), "the finished backfill is as it was, pool included")
	require.Equal(t, before, evTypes(evOf(e, bf.Id)), "no event after the terminal one")

	// The name is free again, and a new backfill naming a pool that is gone is refused.
	p := call[api.Problem](e, http.StatusUnprocessableEntity, http.MethodPost, "/api/v1/backfills", map[string]any{
		"dag_id": "pool_gone", "from_date": day(4, 1), "to_date": day(4, 2), "pool": "gone"})
	require.Equal(t, api.ProblemCode("pool_not_found"), p.Code)
	e.PutPool("gone", 3, http.StatusCreated)
	checkInvariants(t, e.DB)
}

package tests

// Claims are fair (contract, "Exact at any size"): a claim without dag_id reaches every DAG
// and every backfill that has a claimable run, however many owners are idle or already at
// their max_active_runs.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// cfOwners is how many DAGs (or backfills) the scale tests spread their runs over: far more
// than any fixed number of candidates a claim could look at.
const cfOwners = 1000

// cfPutDag creates a DAG with this max_active_runs.
func cfPutDag(e *env, dagID string, maxActiveRuns int, paused bool) error {
	_, err := try[api.Dag](e, http.StatusCreated, http.MethodPut, "/api/v1/dags/"+dagID,
		map[string]any{"schedule": "@daily", "max_active_runs": maxActiveRuns, "is_paused": paused})
	return err
}

// cfManualRuns triggers n manual runs of a DAG on January 1, 2, ... 2024.
func cfManualRuns(e *env, dagID string, n int) error {
	for d := 1; d <= n; d++ {
		_, err := try[api.DagRun](e, http.StatusCreated, http.MethodPost, "/api/v1/dags/"+dagID+"/runs",
			map[string]any{"logical_date": ts(day(1, d))})
		if err != nil {
			return err
		}
	}
	return nil
}

// cfRequireOneRunningOneQueued requires every owner (DAG or backfill) to hold one running
// and one queued run: query groups the owners by (running, queued) and counts them (n).
func cfRequireOneRunningOneQueued(t *testing.T, e *env, owner, query string) {
	t.Helper()
	var groups []struct {
		Running int `db:"running"`
		Queued  int `db:"queued"`
		N       int `db:"n"`
	}
	require.NoError(t, e.DB.Select(&groups, query))
	require.Len(t, groups, 1, "every %s alike: %v", owner, groups)
	require.Equal(t, 1, groups[0].Running)
	require.Equal(t, 1, groups[0].Queued)
	require.Equal(t, cfOwners, groups[0].N)
}

// cfRequireDagCounters compares every DAG's counters of runs outside backfills with a fresh count.
func cfRequireDagCounters(t *testing.T, db *sqlx.DB) {
	t.Helper()
	var wrong []string
	require.NoError(t, db.Select(&wrong, `
		SELECT format('%s: counters queued %s running %s, runs queued %s running %s', d.dag_id,
			d.num_manual_queued, d.num_manual_running, coalesce(c.queued, 0), coalesce(c.running, 0))
		FROM dags d LEFT JOIN (
			SELECT dag_id, count(*) FILTER (WHERE state = 'queued') AS queued,
			       count(*) FILTER (WHERE state = 'running') AS running
			FROM dag_runs WHERE backfill_id IS NULL GROUP BY dag_id) c ON c.dag_id = d.dag_id
		WHERE (d.num_manual_queued, d.num_manual_running) <> (coalesce(c.queued, 0), coalesce(c.running, 0))
		ORDER BY d.dag_id`))
	require.Empty(t, wrong, "DAG counters of runs outside backfills")
}

// 1,000 DAGs, each with max_active_runs 1, one claimable manual run and a second one held
// back by that cap: 1,000 claims of limit 1 hand out 1,000 runs, one per DAG, in dag_id order.
// (A claim that looked at a fixed number of DAGs with queued runs, saturated ones included,
// came back empty from the 65th claim on.)
func TestClaimFairnessReachesEveryDagWithAClaimableManualRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dagID := func(i int) string { return fmt.Sprintf("cf_m_%04d", i) }
	inParallel(t, cfOwners, 8, func(i int) error {
		if err := cfPutDag(e, dagID(i), 1, false); err != nil {
			return err
		}
		return cfManualRuns(e, dagID(i), 2)
	})
	cfRequireDagCounters(t, e.DB)

	for i := range cfOwners {
		runs := e.Claim(fmt.Sprintf("w%d", i), 1)
		require.Len(t, runs, 1, "claim %d", i)
		require.Equal(t, dagID(i), runs[0].DagId, "claim %d: DAGs in dag_id order", i)
		require.True(t, runs[0].LogicalDate.Equal(day(1, 1)), "claim %d: the oldest run of the DAG", i)
		require.Nil(t, runs[0].BackfillId)
	}
	require.Empty(t, e.Claim("w", 100), "every DAG is at its max_active_runs")

	cfRequireOneRunningOneQueued(t, e, "DAG", `
		SELECT running, queued, count(*) AS n FROM (
			SELECT dag_id, count(*) FILTER (WHERE state = 'running') AS running,
			       count(*) FILTER (WHERE state = 'queued') AS queued
			FROM dag_runs GROUP BY dag_id) x
		GROUP BY running, queued`)
	cfRequireDagCounters(t, e.DB)
}

// The same with 1,000 backfills, each with max_active_runs 1 and two runs: 1,000 claims of
// limit 1 hand out one run of each, older backfills first.
func TestClaimFairnessReachesEveryBackfillWithAClaimableRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := make([]int64, cfOwners)
	inParallel(t, cfOwners, 8, func(i int) error {
		dag := fmt.Sprintf("cf_b_%04d", i)
		if err := cfPutDag(e, dag, 16, false); err != nil {
			return err
		}
		res, err := e.do(http.MethodPost, "/api/v1/backfills",
			backfillBody(dag, day(1, 1), day(1, 2), "max_active_runs", 1))
		if err != nil {
			return err
		}
		if res.Status != http.StatusCreated {
			return fmt.Errorf("create backfill for %s answered %d: %s", dag, res.Status, res.Body)
		}
		var b api.Backfill
		if err := json.Unmarshal(res.Body, &b); err != nil {
			return err
		}
		ids[i] = b.Id
		return nil
	})
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })

	for i, id := range ids {
		runs := e.Claim(fmt.Sprintf("w%d", i), 1)
		require.Len(t, runs, 1, "claim %d", i)
		require.NotNil(t, runs[0].BackfillId)
		require.Equal(t, id, *runs[0].BackfillId, "claim %d: older backfills first", i)
		require.True(t, runs[0].LogicalDate.Equal(day(1, 1)), "claim %d: sort_ordinal order", i)
	}
	require.Empty(t, e.Claim("w", 100), "every backfill is at its max_active_runs")

	cfRequireOneRunningOneQueued(t, e, "backfill", `
		SELECT num_running AS running, num_queued AS queued, count(*) AS n FROM backfills
		GROUP BY num_running, num_queued`)
	checkInvariants(t, e.DB)
}

// cfOwner is one DAG (its runs outside backfills) or one backfill of the concurrent test, with
// what it must hand out.
type cfOwner struct {
	dag      string
	backfill int64 // 0 for the DAG's own runs
	cap      int
	queued   int
	paused   bool
}

func (o cfOwner) want() int {
	if o.paused {
		return 0
	}
	return min(o.cap, o.queued)
}

// Claimers released together, each claiming until it gets nothing, over DAGs and backfills
// with various caps, some paused, some with nothing queued: afterwards every owner has exactly
// min(cap, queued) runs running (nothing reports, so the final count is the peak), no run was
// handed out twice, every claimable run was handed out, and every counter is exact.
func TestClaimFairnessConcurrentClaimersDrainEveryOwnerExactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const perKind = 60
	owners := make([]cfOwner, 2*perKind)
	inParallel(t, perKind, 8, func(i int) error {
		// Runs outside backfills: caps 1-3, 0-4 queued runs, every seventh DAG paused.
		m := cfOwner{dag: fmt.Sprintf("cf_cm_%02d", i), cap: 1 + i%3, queued: i % 5, paused: i%7 == 3}
		if err := cfPutDag(e, m.dag, m.cap, m.paused); err != nil {
			return err
		}
		if err := cfManualRuns(e, m.dag, m.queued); err != nil {
			return err
		}
		owners[i] = m
		// Backfills, on DAGs of their own: caps 1-3, 1-4 runs, every sixth paused. The DAG is
		// paused too, now and then: that stops only runs outside backfills.
		b := cfOwner{dag: fmt.Sprintf("cf_cb_%02d", i), cap: 1 + (i/2)%3, queued: 1 + i%4, paused: i%6 == 1}
		if err := cfPutDag(e, b.dag, 1, i%5 == 0); err != nil {
			return err
		}
		res, err := e.do(http.MethodPost, "/api/v1/backfills",
			backfillBody(b.dag, day(2, 1), day(2, b.queued), "max_active_runs", b.cap))
		if err != nil {
			return err
		}
		var created api.Backfill
		if res.Status != http.StatusCreated {
			return fmt.Errorf("create backfill for %s answered %d: %s", b.dag, res.Status, res.Body)
		}
		if err := json.Unmarshal(res.Body, &created); err != nil {
			return err
		}
		b.backfill = created.Id
		if b.paused {
			if _, err := try[api.Backfill](e, http.StatusOK, http.MethodPut, backfillPath(b.backfill)+"/pause", nil); err != nil {
				return err
			}
		}
		owners[perKind+i] = b
		return nil
	})
	total := 0
	for _, o := range owners {
		total += o.want()
	}
	require.Positive(t, total)

	const claimers = 16
	var (
		mu  sync.Mutex
		got []api.DagRun
	)
	releaseTogether(t, claimers, func(g int) error {
		body := map[string]any{"worker_id": fmt.Sprintf("w%d", g), "limit": 1 + g%3}
		for {
			c, err := try[api.ClaimResponse](e, http.StatusOK, http.MethodPost, claimPath, body)
			mu.Lock()
			got = append(got, c.Runs...)
			mu.Unlock()
			if err != nil || len(c.Runs) == 0 {
				return err
			}
		}
	})
	requireDistinctRuns(t, got)
	require.Len(t, got, total, "every claimable run handed out")
	require.Empty(t, e.Claim("w", 100), "nothing left to claim")

	// What each owner handed out, from the answers and from the database.
	answered := map[string]int{}
	for _, r := range got {
		answered[cfOwnerKey(r.DagId, r.BackfillId)]++
	}
	var rows []struct {
		DagID      string `db:"dag_id"`
		BackfillID *int64 `db:"backfill_id"`
		Running    int    `db:"running"`
	}
	require.NoError(t, e.DB.Select(&rows, `
		SELECT dag_id, backfill_id, count(*) AS running FROM dag_runs WHERE state = 'running'
		GROUP BY dag_id, backfill_id`))
	running := map[string]int{}
	for _, r := range rows {
		running[cfOwnerKey(r.DagID, r.BackfillID)] = r.Running
	}
	for _, o := range owners {
		var bf *int64
		if o.backfill != 0 {
			bf = &o.backfill
		}
		key := cfOwnerKey(o.dag, bf)
		require.Equal(t, o.want(), running[key], "running runs of %s (cap %d, %d queued, paused %v)", key, o.cap, o.queued, o.paused)
		require.Equal(t, o.want(), answered[key], "runs handed out by %s", key)
	}
	cfRequireDagCounters(t, e.DB)
	checkInvariants(t, e.DB)
}

func cfOwnerKey(dagID string, backfillID *int64) string {
	if backfillID == nil {
		return "dag " + dagID
	}
	return fmt.Sprintf("backfill %d (%s)", *backfillID, dagID)
}

// The DAG counters that decide whether a DAG's runs outside backfills are claimable follow
// every path that moves such a run: creation, claim, report, lease expiry, marking a queued
// run, a backfill taking a finished run over; and the DAG's own pause and max_active_runs.
func TestClaimFairnessDagCountersFollowEveryManualRunChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "cf_counters"
	e.PutDagWith(dag, "@daily", "max_active_runs", 2)
	for d := 1; d <= 4; d++ {
		e.CreateManualRun(dag, day(1, d), nil)
	}
	counters := func(queued, running int) {
		t.Helper()
		var c struct {
			Queued  int `db:"num_manual_queued"`
			Running int `db:"num_manual_running"`
		}
		require.NoError(t, e.DB.Get(&c, `SELECT num_manual_queued, num_manual_running FROM dags WHERE dag_id = $1`, dag))
		require.Equal(t, queued, c.Queued, "queued")
		require.Equal(t, running, c.Running, "running")
		cfRequireDagCounters(t, e.DB)
	}
	counters(4, 0)

	first := e.ClaimWith(map[string]any{"worker_id": "w1", "limit": 5, "lease_seconds": 10})
	require.Len(t, first, 2, "the DAG's max_active_runs")
	counters(2, 2)
	require.Empty(t, e.Claim("w1", 5))

	e.Report(first[0], "success")
	counters(2, 1)
	third := e.ClaimWithN(1, map[string]any{"worker_id": "w1", "limit": 5, "lease_seconds": 10})
	require.True(t, third[0].LogicalDate.Equal(day(1, 3)))
	counters(1, 2)

	// Both leases expire: the runs go back to the queue.
	e.Clock.Advance(11 * time.Second)
	e.SweepOnce()
	counters(3, 0)

	// A queued run marked without running.
	e.MarkRun(dag, "manual__"+ts(day(1, 4)), "canceled")
	counters(2, 0)

	// Paused, the DAG hands out nothing; a lower cap holds at once.
	e.PutDagWith(dag, "@daily", "max_active_runs", 1, "is_paused", true)
	require.Empty(t, e.Claim("w2", 5))
	e.PutDagWith(dag, "@daily", "max_active_runs", 1)
	again := e.ClaimN(1, "w2", 5)
	counters(1, 1)
	e.Report(again[0], "failed")
	counters(1, 0)

	// A backfill takes the finished manual runs over; the DAG's counters do not move.
	b := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 4), "reprocess_behavior", "completed"))
	require.EqualValues(t, 3, b.Progress.Queued, "the succeeded, failed and canceled runs: %+v", b.Progress)
	counters(1, 0)
	checkInvariants(t, e.DB)
}

package tests

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/stretchr/testify/require"
)

// 32 claimers on two replicas, released together, claim and report a diamond's runs with a
// few failures: no claim ever hands out a blocked run (invariant (j): every started run's
// upstreams had succeeded before it started), failures cancel their dependents (k), the
// counters hold (d), every run is handed out at most once, and the group ends (l).
func TestGroupConcurrentClaimersOnTwoReplicasNeverGetABlockedRun(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.PutDag("a", "@hourly", "")
	a.PutDagWith("b", "@hourly", "upstreams", []any{up("a")})
	a.PutDagWith("c", "@hourly", "upstreams", []any{up("a", "lookback", 1)})
	a.PutDagWith("sink", "@hourly", "upstreams", []any{up("b"), up("c")})
	g := a.CreateGroup([]string{"a"}, day(1, 1), day(1, 1).Add(23*time.Hour), "include_downstream", "all",
		"max_active_runs", 6)
	require.Equal(t, int64(4*24), g.Progress.Total)

	const claimers = 32
	var (
		mu      sync.Mutex
		handed  = map[int64]int{}
		wg      sync.WaitGroup
		release = make(chan struct{})
	)
	for i := range claimers {
		e := a
		if i%2 == 1 {
			e = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			worker := fmt.Sprintf("w%d", i)
			<-release
			for empty := 0; empty < 30; {
				res, err := e.do(http.MethodPost, claimPath, map[string]any{"worker_id": worker, "limit": 1 + rng.IntN(3)})
				if err != nil || res.Status != http.StatusOK {
					t.Errorf("claim: %v %v", err, res)
					return
				}
				var got api.ClaimResponse
				res.Decode(t, &got)
				if len(got.Runs) == 0 {
					empty++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				empty = 0
				for _, run := range got.Runs {
					mu.Lock()
					handed[run.Id]++
					mu.Unlock()
					state := "success"
					if rng.IntN(40) == 0 {
						state = "failed"
					}
					if err := e.reportRetrying(run, state, worker); err != nil {
						t.Errorf("report: %v", err)
						return
					}
				}
			}
		}()
	}
	close(release)
	// Checkpoints while they work, then at the end.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(300 * time.Millisecond):
			requireNoViolations(t, a)
		}
	}
	for id, n := range handed {
		require.Equal(t, 1, n, "run %d handed out %d times", id, n)
	}
	a.SweepOnce()
	g = a.GetGroup(g.Id)
	require.Contains(t, []api.BackfillState{api.BackfillStateSucceeded, api.BackfillStateFailed}, g.State)
	require.Zero(t, g.Progress.Queued+g.Progress.Running, "nothing left behind")
	requireNoViolations(t, a)
}

// reportRetrying reports a run's outcome as its worker, sending the report again after a 503
// busy (a lock held past LOCK_WAIT on a loaded machine), as executors do.
func (e *env) reportRetrying(run api.DagRun, state, worker string) error {
	for try := 0; ; try++ {
		res, err := e.do(http.MethodPatch, runPath(run.DagId, run.RunId), map[string]any{"state": state, "worker_id": worker})
		switch {
		case err != nil:
			return err
		case res.Status == http.StatusOK:
			return nil
		case res.Status == http.StatusServiceUnavailable && try < 10:
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return fmt.Errorf("%d: %s", res.Status, res.Body)
	}
}

func requireNoViolations(t *testing.T, e *env) {
	t.Helper()
	rep := checkInvariants(t, e.DB)
	require.Empty(t, rep.Violations)
}

// A claim that waits for work is answered when a success on another replica unblocks a run.
func TestWaitingClaimIsAnsweredWhenARunIsUnblocked(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.PutDag("up1", "@daily", "")
	a.PutDagWith("down1", "@daily", "upstreams", []any{up("up1")})
	a.CreateGroup([]string{"up1", "down1"}, day(1, 1), day(1, 1))
	first := a.ClaimN(1, "w1", 5)[0]
	require.Equal(t, "up1", first.DagId)
	pending := waitingClaim(b, map[string]any{"worker_id": "w2", "wait_seconds": 20, "dag_id": "down1"})
	time.Sleep(150 * time.Millisecond)
	a.Report(first, "success")
	reported := time.Now()
	got := <-pending
	require.NoError(t, got.err)
	require.Len(t, got.runs, 1)
	require.Equal(t, "down1", got.runs[0].DagId)
	require.Less(t, got.at.Sub(reported), 500*time.Millisecond)
}

// A group's creation whose COMMIT answer is lost answers 503 outcome_unknown; sent again
// with its Idempotency-Key it replays the group the first attempt created, and nothing is
// written twice.
func TestGroupCreateWithALostCommitReplaysThroughItsIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withProxy())
	e.PutDag("lost_a", "@daily", "")
	e.PutDagWith("lost_b", "@daily", "upstreams", []any{up("lost_a")})
	body := map[string]any{"dag_ids": []string{"lost_a"}, "include_downstream": "all",
		"from_date": ts(day(1, 1)), "to_date": ts(day(1, 4))}
	e.Proxy.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
	res := e.Do(http.MethodPost, groupsPath, body, "Idempotency-Key", "group-lost-1")
	e.Proxy.SetRule(nil)
	requireProblem(t, res, http.StatusServiceUnavailable, "outcome_unknown")

	res = e.Do(http.MethodPost, groupsPath, body, "Idempotency-Key", "group-lost-1")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	var g api.BackfillGroup
	res.Decode(t, &g)
	require.Len(t, g.Members, 2)
	require.Equal(t, int64(4), g.Dependencies)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM backfill_groups`))
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM backfills`))
	require.Equal(t, 8, e.Count(`SELECT count(*) FROM dag_runs`))
	require.Equal(t, 4, e.Count(`SELECT count(*) FROM dag_run_dependencies`))

	// The same key with another request is refused.
	body["to_date"] = ts(day(1, 5))
	requireProblem(t, e.Do(http.MethodPost, groupsPath, body, "Idempotency-Key", "group-lost-1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	requireNoViolations(t, e)
}

// The dry run's plan_hash binds the creation (If-Match): the same plan creates, a changed
// one is 412 plan_changed with the current digest and writes nothing.
func TestGroupDryRunPlanHashBindsTheCreation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("h1", "@daily", "")
	e.PutDagWith("h2", "@daily", "upstreams", []any{up("h1")})
	body := map[string]any{"dag_ids": []string{"h1", "h2"}, "from_date": ts(day(1, 1)), "to_date": ts(day(1, 3))}
	res := e.Do(http.MethodPost, groupsPath+"/dry_run", body)
	require.Equal(t, http.StatusOK, res.Status)
	var plan api.BackfillGroupDryRun
	res.Decode(t, &plan)
	require.Equal(t, `"`+plan.PlanHash+`"`, res.Header.Get("ETag"))
	require.Equal(t, int64(3), plan.Dependencies)
	require.Equal(t, int64(3), plan.Blocked)
	require.Equal(t, "h1", plan.Members[0].DagId)
	require.Equal(t, int32(1), plan.Members[1].Depth)
	require.Len(t, plan.Members[1].Runs, 3)

	e.SucceededManualRuns("h1", day(1, 2)) // the plan changes: h1's day 2 exists, skipped
	before := e.TableCounts()
	p := requireProblem(t, e.Do(http.MethodPost, groupsPath, body, "If-Match", `"`+plan.PlanHash+`"`),
		http.StatusPreconditionFailed, "plan_changed")
	require.NotEqual(t, plan.PlanHash, *p.CurrentPlanHash)
	require.Equal(t, before, e.TableCounts())
	g := call[api.BackfillGroup](e, http.StatusCreated, http.MethodPost, groupsPath, body, "If-Match", `"`+*p.CurrentPlanHash+`"`)
	require.Equal(t, *p.CurrentPlanHash, g.PlanHash)
	require.Equal(t, int64(2), g.Dependencies, "h2's day 2 waits for nothing: h1's day 2 succeeded already")
}

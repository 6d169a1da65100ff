package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A transaction holds the oldest claimable backfill (SELECT ... FOR UPDATE) for 5 s while 20
// claim loops run and the Go SDK executor works a run of that backfill with a 10 s lease, on a
// service built like production (admission, lease pool, LOCK_WAIT 2 s) with the database's real
// clock and the sweep running. Claims skip the held backfill instead of parking inside the
// database, so every claim is answered within LOCK_WAIT; heartbeats have slots and connections
// of their own, so none is shed; the run is executed once and succeeds at its first attempt.
func TestAHeldBackfillShedsNoHeartbeatAndParksNoClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The database's real clock: a lease whose heartbeats stopped would expire and the sweep
	// would hand the run out again, as in production.
	_, err := e.DB.Exec(`DELETE FROM test_clock`)
	require.NoError(t, err)
	const lockWait = 2 * time.Second
	adm, obs := productionShape(t, e, lockWait)
	// Warm the pool, as a service that has been up a while has it: the first claims on fresh
	// connections pay for connecting and preparing, which is not what is measured here. With
	// nothing to claim yet, they take nothing.
	require.NoError(t, <-startTogether(20, 20, func(i int) error {
		res, err := adm.do(http.MethodPost, claimPath, map[string]any{"worker_id": "warm", "limit": 1})
		// Cold, the burst itself may shed a claim or two: that is what warming avoids below.
		if err == nil && res.Status != http.StatusOK && res.Status != http.StatusServiceUnavailable {
			err = fmt.Errorf("warm-up claim: %d %s", res.Status, res.Body)
		}
		return err
	}))

	held := adm.DailyBackfill("stall_held", day(1, 1), day(1, 10), "max_active_runs", 10)
	adm.DailyBackfill("stall_other", day(1, 1), day(12, 31), "max_active_runs", 100)
	e.sweepInBackground(t)

	var (
		mu         sync.Mutex
		executions = map[string]int{}
		once       sync.Once
	)
	started := make(chan client.DagRun, 1)
	work := func(ctx context.Context, run client.DagRun) error {
		mu.Lock()
		executions[run.DagId+"/"+run.RunId]++
		mu.Unlock()
		long := false
		once.Do(func() { long = true })
		if !long {
			return nil
		}
		started <- run
		// Longer than the hold: the run heartbeats all through it.
		select {
		case <-time.After(7 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	execCtx, stopExec := context.WithCancel(context.Background())
	execDone := make(chan error, 1)
	go func() {
		execDone <- adm.sdk(t).RunExecutor(execCtx, client.ExecutorConfig{
			WorkerID: "executor", DagID: "stall_held", LeaseSeconds: 10, HeartbeatEvery: 500 * time.Millisecond,
			IdleBackoff: 50 * time.Millisecond, MaxIdleBackoff: 200 * time.Millisecond,
		}, work)
	}()
	defer func() {
		stopExec()
		require.NoError(t, <-execDone)
	}()
	longRun := <-started
	require.Equal(t, held.Id, *longRun.BackfillId)

	hold := e.hold(fmt.Sprintf(`SELECT id FROM backfills WHERE id = %d FOR UPDATE`, held.Id))

	type claimAnswer struct {
		status int
		took   time.Duration
		runs   int
		at     time.Duration // since the hold began
	}
	holdStart := time.Now()
	var (
		answersMu sync.Mutex
		answers   []claimAnswer
	)
	stop := make(chan struct{})
	loops := startTogether(20, 20, func(i int) error {
		worker := fmt.Sprintf("claimer%d", i)
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			start := time.Now()
			res, err := adm.do(http.MethodPost, claimPath, map[string]any{"worker_id": worker, "limit": 1, "lease_seconds": 10})
			if err != nil {
				return err
			}
			a := claimAnswer{status: res.Status, took: time.Since(start), at: start.Sub(holdStart)}
			if res.Status == http.StatusOK {
				var claimed api.ClaimResponse
				if err := json.Unmarshal(res.Body, &claimed); err != nil {
					return err
				}
				a.runs = len(claimed.Runs)
				// The claimers keep what they claim (the other backfill's cap, 100, ends
				// their takings): they are claim pressure, not a second executor.
				for _, run := range claimed.Runs {
					if run.DagId == "stall_held" {
						return fmt.Errorf("claimed %s of the held backfill", run.RunId)
					}
				}
			} else if res.Status != http.StatusServiceUnavailable {
				return fmt.Errorf("claim: %d %s", res.Status, res.Body)
			}
			answersMu.Lock()
			answers = append(answers, a)
			answersMu.Unlock()
		}
	})
	time.Sleep(5 * time.Second) // the hold
	close(stop)
	require.NoError(t, <-loops)
	require.NoError(t, hold.Rollback())

	// The long run finishes after the hold and reports; then every run of the held backfill
	// is worked by the executor.
	if !assert.Eventually(t, func() bool {
		return e.Count(`SELECT count(*) FROM dag_runs WHERE backfill_id = $1 AND state <> 'success'`, held.Id) == 0
	}, 60*time.Second, 100*time.Millisecond, "the held backfill's runs succeed once the hold ends") {
		var states []struct {
			RunID    string  `db:"run_id"`
			State    string  `db:"state"`
			WorkerID *string `db:"worker_id"`
			Attempt  int     `db:"attempt"`
		}
		require.NoError(t, e.DB.Select(&states, `SELECT run_id, state, worker_id, attempt FROM dag_runs WHERE backfill_id = $1 ORDER BY run_id`, held.Id))
		t.Fatalf("the held backfill's runs: %+v", states)
	}

	var slowest, slowestAt time.Duration
	statuses := map[int]int{}
	claimed := 0
	for _, a := range answers {
		if a.took > slowest {
			slowest, slowestAt = a.took, a.at
		}
		statuses[a.status]++
		claimed += a.runs
	}
	admitted, shed := obs.counts()
	t.Logf("claims: %d answered %v, %d runs claimed, slowest %s (sent %s into the hold); admitted %v, shed %v",
		len(answers), statuses, claimed, slowest, slowestAt, admitted, shed)
	require.Zero(t, shed["lease"]+shed["heartbeat"], "heartbeats or reports shed")
	require.Less(t, slowest, lockWait, "a claim waited on the held backfill")
	require.Positive(t, claimed, "claims kept handing out runs of the other backfill")

	var attempt int
	require.NoError(t, e.DB.Get(&attempt, `SELECT attempt FROM dag_runs WHERE id = $1`, longRun.Id))
	require.Equal(t, 1, attempt, "the long run's lease never lapsed")
	mu.Lock()
	defer mu.Unlock()
	for run, n := range executions {
		require.Equal(t, 1, n, "%s executed %d times", run, n)
	}
	require.Len(t, executions, e.Count(`SELECT count(*) FROM dag_runs WHERE backfill_id = $1`, held.Id))
}

// A report of a run whose backfill another transaction holds waits LOCK_WAIT, then answers
// 503 busy with Retry-After and an honest detail; nothing is written. Once the hold ends, the
// same report succeeds.
func TestAReportOnAHeldBackfillAnswersBusyAfterLockWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lockWait = 500 * time.Millisecond
	adm, _ := productionShape(t, e, lockWait)
	b := adm.DailyBackfill("held_report", day(1, 1), day(1, 3))
	run := adm.Claim("w1", 1)[0]

	hold := e.hold(fmt.Sprintf(`SELECT id FROM backfills WHERE id = %d FOR UPDATE`, b.Id))

	for _, req := range []struct{ method, path string }{
		{http.MethodPatch, runPath(run.DagId, run.RunId)},
		{http.MethodPost, fmt.Sprintf("/api/v1/runs/%d/release", run.Id)},
	} {
		body := map[string]any{"worker_id": "w1"}
		if req.method == http.MethodPatch {
			body["state"] = "success"
		}
		start := time.Now()
		res := adm.Do(req.method, req.path, body)
		took := time.Since(start)
		p := requireProblem(t, res, http.StatusServiceUnavailable, "busy", req.method, " ", req.path)
		require.Equal(t, "waited LOCK_WAIT for a row another request holds; nothing was written", p.Detail)
		require.NotEmpty(t, res.Header.Get("Retry-After"))
		require.GreaterOrEqual(t, took, lockWait-lockBudgetSlack, "%s answered before LOCK_WAIT", req.path)
		// A generous bound: it came back instead of waiting for the holder.
		require.Less(t, took, lockWait+10*time.Second)
	}
	got := adm.GetRun(run.DagId, run.RunId)
	require.Equal(t, api.DagRunStateRunning, got.State, "nothing was written")
	require.Equal(t, 1, e.Count(`SELECT num_running FROM backfills WHERE id = $1`, b.Id))

	require.NoError(t, hold.Rollback())
	rep := adm.PatchRun(run.DagId, run.RunId, "success", "w1")
	require.Equal(t, http.StatusOK, rep.Status, "%s", rep.Body)
	require.True(t, strings.Contains(string(rep.Body), `"success"`))
}

// Reports waiting for a held backfill do not shed the heartbeats of other runs: they may take
// all but a reserve of the lease slots (handlers.AdmissionLimits.Report), and a heartbeat
// locks only its own run. Before the reserve, four reports of one held backfill took every
// lease slot for LOCK_WAIT and the heartbeats of unrelated runs were shed: a healthy worker
// lost its lease (an audit, 2026-12-06).
func TestReportsOnAHeldBackfillLeaveHeartbeatsTheirSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lockWait = 2 * time.Second
	adm, _ := productionShape(t, e, lockWait)
	a := adm.DailyBackfill("held_reports_a", day(1, 1), day(1, 8), "max_active_runs", 8)
	held := adm.ClaimWithN(8, map[string]any{"worker_id": "wa", "limit": 8, "dag_id": "held_reports_a"})
	adm.DailyBackfill("held_reports_b", day(1, 1), day(1, 1))
	other := adm.ClaimWithN(1, map[string]any{"worker_id": "wb", "limit": 1, "dag_id": "held_reports_b"})[0]

	hold := e.hold(fmt.Sprintf(`SELECT 1 FROM backfills WHERE id = %d FOR UPDATE`, a.Id))

	// Eight reports of the held backfill, more than the lease slots, all waiting for its row.
	reports := startTogether(len(held), len(held), func(i int) error {
		run := held[i]
		res, err := adm.do(http.MethodPatch, runPath(run.DagId, run.RunId), map[string]any{"state": "success", "worker_id": "wa"})
		if err != nil {
			return err
		}
		if res.Status != http.StatusServiceUnavailable {
			return fmt.Errorf("report of a held backfill: %d %s", res.Status, res.Body)
		}
		return nil
	})
	// Once the reports wait on the row (as many as their slots allow), heartbeats of the other
	// backfill's run are answered at once, again and again.
	require.Eventually(t, func() bool {
		return e.Count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) >= 3
	}, 10*time.Second, 5*time.Millisecond)
	for range 5 {
		start := time.Now()
		res := adm.Heartbeat(other.Id, "wb")
		require.Equal(t, http.StatusOK, res.Status, "a heartbeat of an unrelated run: %s", res.Body)
		require.Less(t, time.Since(start), lockWait, "the heartbeat waited behind the reports")
	}
	require.NoError(t, <-reports)
	require.NoError(t, hold.Rollback())
}

// A heartbeat of a run whose row another transaction holds waits LOCK_WAIT, then answers 503
// busy, nothing written: before, it waited as long as the holder liked (an audit: 14 s).
func TestAHeartbeatOfAHeldRunAnswersBusyAfterLockWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lockWait = 500 * time.Millisecond
	adm, _ := productionShape(t, e, lockWait)
	adm.DailyBackfill("held_run", day(1, 1), day(1, 1))
	run := adm.ClaimN(1, "w1", 1)[0]

	hold := e.hold(fmt.Sprintf(`SELECT 1 FROM dag_runs WHERE id = %d FOR UPDATE`, run.Id))

	start := time.Now()
	res := adm.Heartbeat(run.Id, "w1")
	took := time.Since(start)
	p := requireProblem(t, res, http.StatusServiceUnavailable, "busy")
	require.Equal(t, "waited LOCK_WAIT for a row another request holds; nothing was written", p.Detail)
	require.GreaterOrEqual(t, took, lockWait-lockBudgetSlack)
	// A generous bound: it came back instead of waiting for the holder.
	require.Less(t, took, lockWait+10*time.Second)
	require.NoError(t, hold.Rollback())
	require.Equal(t, http.StatusOK, adm.Heartbeat(run.Id, "w1").Status, "once the hold ends")
}

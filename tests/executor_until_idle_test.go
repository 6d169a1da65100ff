package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// --until-idle means idle: while another worker holds the only slot (the backfill's
// max_active_runs), the executor finds nothing to claim but runs of its DAG are still queued
// and running, so it waits; once the other worker reports, it claims the rest, runs them, and
// exits 0 only when nothing of its DAG is left queued or running anywhere.
func TestExecutorUntilIdleWaitsWhileAnotherWorkerHoldsTheOnlySlot(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	b := e.DailyBackfill("idle_slot", day(8, 1), day(8, 3), "max_active_runs", 1)
	held := e.ClaimN(1, "other", 1)[0]
	out := filepath.Join(t.TempDir(), "ran")
	_, done := startExecutor(t, bin, e, "executor", "-o", "json", "--until-idle", "--dag-id", "idle_slot",
		"--", "sh", "-c", `echo "$1" >> "$2"`, "sh", "{{ run_id }}", out)

	// The executor polls with a backoff that starts at 250 ms: in 1.5 s it has found nothing
	// to claim several times.
	select {
	case r := <-done:
		t.Fatalf("the executor exited (code %d) while runs of its DAG were queued behind another worker's; stdout: %s stderr: %s",
			r.code, r.stdout, r.stderr)
	case <-time.After(1500 * time.Millisecond):
	}
	require.NoFileExists(t, out, "nothing was claimable while the slot was held")
	e.Report(held, "success")

	var r cliResult
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the executor did not exit once its DAG was idle")
	}
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.EqualValues(t, map[string]int64{"success": 3}, runStates(t, e.DB, b.Id))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, strings.Fields(string(data)), 2, "the executor ran the two runs the other worker did not")
}

// With --pool, the pool's queued and running runs count, whatever their DAG: a run of another
// DAG holding the pool's only slot keeps the executor waiting for the runs queued behind it.
func TestExecutorUntilIdleWaitsForItsPool(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	e.PutPool("idle_pool", 1, 201)
	e.DailyBackfill("idle_pool_a", day(8, 1), day(8, 1), "pool", "idle_pool")
	b := e.DailyBackfill("idle_pool_b", day(8, 1), day(8, 2), "pool", "idle_pool")
	held := e.ClaimN(1, "other", 1)[0]
	_, done := startExecutor(t, bin, e, "executor", "-o", "json", "--until-idle", "--pool", "idle_pool",
		"--", "true")
	select {
	case r := <-done:
		t.Fatalf("the executor exited (code %d) while its pool had queued runs; stdout: %s stderr: %s", r.code, r.stdout, r.stderr)
	case <-time.After(1500 * time.Millisecond):
	}
	e.Report(held, "success")
	var r cliResult
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the executor did not exit once its pool was idle")
	}
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Zero(t, runStates(t, e.DB, b.Id)["queued"])
	p := e.GetPool("idle_pool")
	require.Zero(t, p.Queued+p.Running)
}

// The Go SDK's UntilIdle is the same rule, here with no filter at all: a run of any DAG
// queued behind another worker's keeps RunExecutor claiming until it is done.
func TestSDKUntilIdleWithoutFiltersWaitsForEveryDAG(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.DailyBackfill("idle_sdk_free", day(8, 1), day(8, 1))
	b := e.DailyBackfill("idle_sdk_held", day(8, 1), day(8, 2), "max_active_runs", 1)
	held := e.ClaimWithN(1, map[string]any{"worker_id": "other", "dag_id": "idle_sdk_held"})[0]
	c, err := client.New(e.URL, "")
	require.NoError(t, err)
	var ran atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.RunExecutor(context.Background(), client.ExecutorConfig{
			WorkerID: "sdk", UntilIdle: true, IdleBackoff: 50 * time.Millisecond, MaxIdleBackoff: 200 * time.Millisecond,
		}, func(context.Context, client.DagRun) error { ran.Add(1); return nil })
	}()
	select {
	case err := <-done:
		t.Fatalf("RunExecutor returned (%v) while a run was queued behind another worker's", err)
	case <-time.After(1500 * time.Millisecond):
	}
	require.EqualValues(t, 1, ran.Load(), "only the free DAG's run was claimable")
	e.Report(held, "success")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("RunExecutor did not return once every DAG was idle")
	}
	require.EqualValues(t, 2, ran.Load())
	require.EqualValues(t, map[string]int64{"success": 2}, runStates(t, e.DB, b.Id))
}

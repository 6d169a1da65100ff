package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
	"github.com/stretchr/testify/require"
)

// sdk is a Go SDK client of the env's server; every answer it gets is checked against the
// spec.
func (e *env) sdk(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(e.URL, e.Token, client.WithHTTPClient(e.specHTTP(t)))
	require.NoError(t, err)
	return c
}

// sweepInBackground runs a sweep pass every few milliseconds until the test ends, as the
// service's own sweeper would every SWEEP_INTERVAL.
func (e *env) sweepInBackground(t testing.TB) {
	e.everyTick(t, 10*time.Millisecond, "sweep", e.Sweep.RunOnce)
}

// everyTick calls fn on each tick of every until the test ends (its cleanups wait for the
// last call, before newEnv's drops the database); the first error fails the test and ends
// the calls.
func (e *env) everyTick(t testing.TB, every time.Duration, what string, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var failed bool // only the ticking goroutine reads and writes it
	stop := loadkit.Every(every, func() {
		if failed {
			return
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			failed = true
			t.Errorf("%s: %v", what, err)
		}
	})
	t.Cleanup(func() { cancel(); stop() })
}

// runSDKExecutors runs n SDK executor loops (workers w1..wn) until the test ends.
func runSDKExecutors(t testing.TB, c *client.Client, n int, cfg client.ExecutorConfig, work func(context.Context, client.DagRun) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		cfg := cfg
		cfg.WorkerID = fmt.Sprintf("w%d", i)
		wg.Go(func() {
			if err := c.RunExecutor(ctx, cfg, work); err != nil {
				t.Errorf("executor %s: %v", cfg.WorkerID, err)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// sdkDailyDag puts a daily DAG through the SDK.
func sdkDailyDag(t testing.TB, c *client.Client, dagID string) {
	t.Helper()
	_, _, err := c.PutDag(context.Background(), dagID, client.DagPut{Schedule: "@daily"})
	require.NoError(t, err)
}

// sdkBackfill puts a daily DAG and creates a backfill of it through the SDK.
func sdkBackfill(t testing.TB, c *client.Client, req client.BackfillCreate) client.Backfill {
	t.Helper()
	sdkDailyDag(t, c, req.DagId)
	b, err := c.CreateBackfill(context.Background(), req, client.CreateOptions{})
	require.NoError(t, err)
	return b
}

// newSDKExecutorEnv is an env for executor tests: its sweeper runs in the background, and
// req's backfill (on a daily DAG) is created through the SDK client it answers.
func newSDKExecutorEnv(t *testing.T, req client.BackfillCreate) (*client.Client, client.Backfill) {
	t.Helper()
	e := newEnv(t)
	c := e.sdk(t)
	b := sdkBackfill(t, c, req)
	e.sweepInBackground(t)
	return c, b
}

// sdkFastExecutor polls often, so that tests finish quickly.
var sdkFastExecutor = client.ExecutorConfig{Limit: 2, IdleBackoff: 5 * time.Millisecond, MaxIdleBackoff: 20 * time.Millisecond}

func sdkPtr[T any](v T) *T { return &v }

// sdkWait waits, with a deadline, for a backfill to become terminal.
func sdkWait(t testing.TB, c *client.Client, id int64) client.Backfill {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := c.WaitBackfill(ctx, id, 10*time.Millisecond, nil)
	require.NoError(t, err, "last seen: %+v", b)
	return b
}

func TestSDKDagsDryRunCreateIdempotencyAndConflicts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.sdk(t)
	ctx := context.Background()

	d, created, err := c.PutDag(ctx, "sdk", client.DagPut{Schedule: "@daily", Timezone: sdkPtr("UTC")})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "@daily", d.Schedule)
	_, created, err = c.PutDag(ctx, "sdk", client.DagPut{Schedule: "@daily"})
	require.NoError(t, err)
	require.False(t, created)
	dags, err := c.ListDags(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, dags.TotalEntries)
	_, err = c.GetDag(ctx, "nope")
	require.True(t, client.IsCode(err, client.ProblemCodeDagNotFound), "err: %v", err)

	req := client.BackfillCreate{DagId: "sdk", FromDate: day(1, 1), ToDate: day(1, 5), MaxActiveRuns: sdkPtr[int32](2)}
	dry, err := c.DryRunBackfill(ctx, req)
	require.NoError(t, err)
	require.EqualValues(t, 5, dry.TotalEntries)
	for _, slot := range dry.Runs {
		require.Equal(t, client.DryRunActionCreate, slot.Action)
	}

	b, err := c.CreateBackfill(ctx, req, client.CreateOptions{IdempotencyKey: "sdk-jan"})
	require.NoError(t, err)
	require.Equal(t, client.BackfillStateRunning, b.State)
	require.EqualValues(t, 5, b.Progress.Total)
	again, err := c.CreateBackfill(ctx, req, client.CreateOptions{IdempotencyKey: "sdk-jan"})
	require.NoError(t, err, "a replay of the same key and request")
	require.Equal(t, b.Id, again.Id)

	other := client.BackfillCreate{DagId: "sdk", FromDate: day(2, 1), ToDate: day(2, 3)}
	_, err = c.CreateBackfill(ctx, other, client.CreateOptions{IdempotencyKey: "sdk-jan"})
	require.True(t, client.IsCode(err, client.ProblemCodeIdempotencyKeyReused), "err: %v", err)
	_, err = c.CreateBackfill(ctx, other, client.CreateOptions{})
	var p *client.ProblemError
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Equal(t, client.ProblemCodeBackfillAlreadyRunning, p.Code)
	require.NotNil(t, p.ActiveBackfillID)
	require.Equal(t, b.Id, *p.ActiveBackfillID)

	_, err = c.CreateBackfill(ctx, client.BackfillCreate{DagId: "sdk", FromDate: day(1, 5), ToDate: day(1, 1)}, client.CreateOptions{})
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusUnprocessableEntity, p.Status)

	list, err := c.ListBackfills(ctx, &client.ListBackfillsParams{DagId: sdkPtr("sdk"), Active: sdkPtr(true)})
	require.NoError(t, err)
	require.Len(t, list.Backfills, 1)
	slots, err := c.ListBackfillDagRuns(ctx, b.Id, &client.ListBackfillDagRunsParams{Limit: sdkPtr(2)})
	require.NoError(t, err)
	require.EqualValues(t, 5, slots.TotalEntries)
	require.Len(t, slots.BackfillDagRuns, 2)

	paused, err := c.PauseBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.True(t, paused.IsPaused)
	unpaused, err := c.UnpauseBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.Equal(t, client.BackfillStateRunning, unpaused.State)

	// Nothing runs, so the cancel is final at once and a wait answers straight away.
	canceled, err := c.CancelBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.Equal(t, client.BackfillStateCanceled, canceled.State)
	final := sdkWait(t, c, b.Id)
	require.Equal(t, client.BackfillStateCanceled, final.State)
	require.EqualValues(t, 5, final.Progress.Canceled)
	_, err = c.PauseBackfill(ctx, b.Id)
	require.True(t, client.IsCode(err, client.ProblemCodeBackfillNotActive), "err: %v", err)
	_, err = c.GetBackfill(ctx, 999)
	require.True(t, client.IsCode(err, client.ProblemCodeBackfillNotFound), "err: %v", err)
}

func TestSDKExecutorsCompleteEveryRunAndTheBackfillSucceeds(t *testing.T) {
	t.Parallel()
	c, b := newSDKExecutorEnv(t, client.BackfillCreate{DagId: "sdk_ok", FromDate: day(3, 1), ToDate: day(3, 12), MaxActiveRuns: sdkPtr[int32](3)})
	ctx := context.Background()

	var mu sync.Mutex
	workedBy := map[string]string{} // run_id -> worker
	runSDKExecutors(t, c, 2, sdkFastExecutor, func(ctx context.Context, run client.DagRun) error {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := workedBy[run.RunId]; dup {
			return fmt.Errorf("run %s handed out twice", run.RunId)
		}
		workedBy[run.RunId] = *run.WorkerId
		return nil
	})

	var seen []client.BackfillProgress
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	final, err := c.WaitBackfill(wctx, b.Id, 10*time.Millisecond, func(b client.Backfill) { seen = append(seen, b.Progress) })
	require.NoError(t, err)
	require.Equal(t, client.BackfillStateSucceeded, final.State)
	require.Equal(t, client.BackfillProgress{Total: 12, Success: 12}, final.Progress)
	require.NotNil(t, final.CompletedAt)
	require.NotEmpty(t, seen)
	mu.Lock()
	require.Len(t, workedBy, 12)
	mu.Unlock()

	// Every run was reported by the worker that claimed it.
	runs, err := c.Raw.ListDagRunsWithResponse(ctx, "sdk_ok", &client.ListDagRunsParams{BackfillId: &b.Id, Limit: sdkPtr(100)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, runs.StatusCode())
	for _, r := range runs.JSON200.DagRuns {
		require.Equal(t, client.DagRunStateSuccess, r.State)
		require.Contains(t, []string{"w1", "w2"}, *r.WorkerId)
	}
}

func TestSDKExecutorErrorFailsTheRunAndTheBackfill(t *testing.T) {
	t.Parallel()
	c, b := newSDKExecutorEnv(t, client.BackfillCreate{DagId: "sdk_fail", FromDate: day(4, 1), ToDate: day(4, 6)})
	ctx := context.Background()

	bad := day(4, 3)
	runSDKExecutors(t, c, 2, sdkFastExecutor, func(ctx context.Context, run client.DagRun) error {
		if run.LogicalDate.Equal(bad) {
			return errors.New("upstream table missing")
		}
		return nil
	})
	final := sdkWait(t, c, b.Id)
	require.Equal(t, client.BackfillStateFailed, final.State)
	require.Equal(t, client.BackfillProgress{Total: 6, Success: 5, Failed: 1}, final.Progress)

	slots, err := c.ListBackfillDagRuns(ctx, b.Id, nil)
	require.NoError(t, err)
	for _, s := range slots.BackfillDagRuns {
		want := client.DagRunStateSuccess
		if s.LogicalDate.Equal(bad) {
			want = client.DagRunStateFailed
		}
		require.Equal(t, want, *s.State, "slot %s", s.LogicalDate)
	}
}

func TestSDKCancelStopsRunningWorkAndTheBackfillEndsCanceled(t *testing.T) {
	t.Parallel()
	c, b := newSDKExecutorEnv(t, client.BackfillCreate{DagId: "sdk_cancel", FromDate: day(5, 1), ToDate: day(5, 5), MaxActiveRuns: sdkPtr[int32](2)})
	ctx := context.Background()

	started := make(chan string, 5)
	causes := make(chan error, 5)
	cfg := sdkFastExecutor
	cfg.HeartbeatEvery = 10 * time.Millisecond
	runSDKExecutors(t, c, 1, cfg, func(ctx context.Context, run client.DagRun) error {
		started <- run.RunId
		<-ctx.Done() // work that only stops when told to
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	deadline := time.After(time.Minute)
	for range 2 {
		select {
		case <-started:
		case <-deadline:
			t.Fatal("the executor did not start two runs")
		}
	}

	canceling, err := c.CancelBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.Equal(t, client.BackfillStateCanceling, canceling.State, "two runs are still running")
	for range 2 {
		select {
		case cause := <-causes:
			require.ErrorIs(t, cause, client.ErrCancelRequested)
		case <-deadline:
			t.Fatal("the running work was not canceled")
		}
	}
	final := sdkWait(t, c, b.Id)
	require.Equal(t, client.BackfillStateCanceled, final.State)
	require.Equal(t, client.BackfillProgress{Total: 5, Canceled: 5}, final.Progress)
	require.Empty(t, started, "no run was started after the cancel")
}

func TestSDKSendsTheBearerToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens("sdk-token"))
	ok, err := client.New(e.URL, "sdk-token", client.WithHTTPClient(e.specHTTP(t)))
	require.NoError(t, err)
	_, err = ok.ListDags(context.Background(), nil)
	require.NoError(t, err)

	anon, err := client.New(e.URL, "", client.WithHTTPClient(e.specHTTP(t)))
	require.NoError(t, err)
	_, err = anon.ListDags(context.Background(), nil)
	var p *client.ProblemError
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusUnauthorized, p.Status)
	require.Equal(t, client.ProblemCodeUnauthorized, p.Code)
}

package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/testkit/airflowfake"
	"github.com/stretchr/testify/require"
)

func testBridge(t *testing.T) (*airflowfake.Fake, *airflowBridge) {
	f := airflowfake.New(t, "tok")
	lines := &runLines{w: lockedWriter{mu: new(sync.Mutex), w: io.Discard}, started: map[int64]time.Time{}}
	return f, &airflowBridge{api: newAirflowAPI(f.URL, "tok", "", ""), poll: 10 * time.Millisecond,
		log: slog.New(slog.DiscardHandler), lines: lines}
}

func testRun(dagID string, backfillID int64, logical time.Time) client.DagRun {
	conf := client.Conf(`{"region":"eu"}`)
	return client.DagRun{
		Id: 7, DagId: dagID, RunId: "backfill__" + logical.Format(time.RFC3339), BackfillId: &backfillID,
		LogicalDate: logical, DataIntervalStart: logical, DataIntervalEnd: logical.Add(time.Hour),
		Conf: &conf, Attempt: 1,
	}
}

// workUntilRunning starts the work and cancels its context with cause once Airflow's run is
// running; it answers the work's error.
func workUntilRunning(t *testing.T, f *airflowfake.Fake, b *airflowBridge, run client.DagRun, cause error) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- b.work(ctx, run) }()
	key := run.DagId + "/" + airflowRunID(run)
	require.Eventually(t, func() bool { return f.Runs()[key].State == "running" }, 10*time.Second, 5*time.Millisecond)
	cancel(cause)
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the work did not return once its context ended")
		return nil
	}
}

// The lease running out on this machine, or SIGTERM, stops following Airflow's run and
// leaves it running there; a cancel of the backfill sets it failed.
func TestAirflowBridgeStopsFollowingAndFailsAirflowsRunOnlyOnACancel(t *testing.T) {
	logical := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		cause   error
		patches []string
		state   string
	}{
		{client.ErrLeaseExpired, nil, "running"},
		{context.Canceled, nil, "running"},
		{client.ErrCancelRequested, []string{"failed"}, "failed"},
	} {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			f, b := testBridge(t)
			f.AddDAG(airflowfake.DAG{DagID: "sales", Timezone: "UTC"})
			f.Script(func(string, time.Time) airflowfake.Outcome { return airflowfake.Outcome{Hold: true} })
			run := testRun("sales", 3, logical)
			err := workUntilRunning(t, f, b, run, tc.cause)
			require.ErrorIs(t, err, tc.cause, "never nil: the SDK must not report success")
			got := f.Runs()["sales/backfillsvc__3__2024-05-01T00:00:00Z"]
			require.Equal(t, tc.patches, got.Patches)
			require.Equal(t, tc.state, got.State)
			require.JSONEq(t, `{"region":"eu"}`, string(got.Conf))
			require.Equal(t, logical.Add(time.Hour), got.DataIntervalEnd.UTC())
		})
	}
}

// A DAG Airflow does not have fails the run at once with Airflow's answer as the note.
func TestAirflowBridgeFailsARunAirflowRefusesToTrigger(t *testing.T) {
	f, b := testBridge(t)
	err := b.work(context.Background(), testRun("absent", 3, time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)))
	require.ErrorContains(t, err, "airflow refused to trigger backfillsvc__3__2024-05-01T00:00:00Z of DAG absent: airflow answered 404")
	require.Contains(t, err.Error(), "The Dag with ID: `absent` was not found")
	require.Empty(t, f.Triggers())
}

// A run that fails in Airflow is reported with its failed task ids; one that succeeds is
// nil. A second work for the same slot follows the first run (409), never triggers again.
func TestAirflowBridgeReportsAirflowsOutcomeAndFollowsAnExistingRun(t *testing.T) {
	f, b := testBridge(t)
	f.AddDAG(airflowfake.DAG{DagID: "sales", Timezone: "UTC"})
	fails := time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC)
	f.Script(func(_ string, logical time.Time) airflowfake.Outcome {
		if logical.Equal(fails) {
			return airflowfake.Outcome{Polls: 3, FailedTasks: []string{"extract_eu", "load"}}
		}
		return airflowfake.Outcome{Polls: 3}
	})
	ok := testRun("sales", 4, fails.AddDate(0, 0, -1))
	require.NoError(t, b.work(context.Background(), ok))
	err := b.work(context.Background(), testRun("sales", 4, fails))
	require.EqualError(t, err, "the Airflow run backfillsvc__4__2024-05-02T00:00:00Z of DAG sales failed; failed tasks: extract_eu, load")

	require.NoError(t, b.work(context.Background(), ok), "the same slot again: Airflow's run already succeeded")
	require.Equal(t, map[string]int{"sales/backfillsvc__4__2024-05-01T00:00:00Z": 1, "sales/backfillsvc__4__2024-05-02T00:00:00Z": 1}, f.Triggers())
	require.Equal(t, map[string]int{"sales/backfillsvc__4__2024-05-01T00:00:00Z": 1}, f.Conflicts())
}

// syncBuffer is a log sink the work's goroutine writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A run of a DAG paused in Airflow stays queued there for ever: the bridge keeps following
// it and warns, saying why it may be.
func TestAirflowBridgeWarnsWhileAirflowsRunStaysQueued(t *testing.T) {
	f, b := testBridge(t)
	f.AddDAG(airflowfake.DAG{DagID: "paused", Timezone: "UTC", IsPaused: true})
	var logs syncBuffer
	b.log, b.queuedWarn = slog.New(slog.NewTextHandler(&logs, nil)), 30*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.work(ctx, testRun("paused", 5, time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC))) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "is the DAG paused in Airflow") },
		10*time.Second, 5*time.Millisecond)
	require.Equal(t, "queued", f.Runs()["paused/backfillsvc__5__2024-05-01T00:00:00Z"].State)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

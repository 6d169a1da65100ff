package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeExecutorAPI hands out queued runs once each and records heartbeats and reports.
type fakeExecutorAPI struct {
	mu        sync.Mutex
	queued    []DagRun
	claims    []ClaimRequest
	heartbeat func(id int64) (HeartbeatResponse, *Problem) // nil: a plain extension
	reports   map[string]DagRunPatch
	reported  chan string
	released  []string // "<id> <worker_id>" of each release
	// refuseReports answers this many reports 503 before it takes one; patches counts
	// every report received.
	refuseReports int
	patches       int
	beats         []time.Time // when each heartbeat arrived
}

func newFakeExecutorAPI(runs ...DagRun) *fakeExecutorAPI {
	return &fakeExecutorAPI{queued: runs, reports: map[string]DagRunPatch{}, reported: make(chan string, 100)}
}

func (f *fakeExecutorAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/runs/claim", func(w http.ResponseWriter, r *http.Request) {
		var req ClaimRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.claims = append(f.claims, req)
		n := min(*req.Limit, len(f.queued))
		out := f.queued[:n:n]
		f.queued = f.queued[n:]
		for i := range out {
			out[i].State = DagRunStateRunning
			out[i].WorkerId = &req.WorkerId
		}
		writeJSON(w, http.StatusOK, ClaimResponse{Runs: append([]DagRun{}, out...)})
	})
	mux.HandleFunc("POST /api/v1/runs/{id}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		f.mu.Lock()
		hbf := f.heartbeat
		f.beats = append(f.beats, time.Now())
		f.mu.Unlock()
		if hbf == nil {
			writeJSON(w, http.StatusOK, HeartbeatResponse{LeaseExpiresAt: time.Now().Add(time.Minute)})
			return
		}
		hb, p := hbf(id)
		if p != nil {
			writeProblem(w, *p)
			return
		}
		writeJSON(w, http.StatusOK, hb)
	})
	mux.HandleFunc("POST /api/v1/runs/{id}/release", func(w http.ResponseWriter, r *http.Request) {
		var body ReleaseRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.released = append(f.released, r.PathValue("id")+" "+body.WorkerId)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, DagRun{State: DagRunStateQueued})
	})
	mux.HandleFunc("PATCH /api/v1/dags/{dag}/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		var body DagRunPatch
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.patches++
		if f.patches <= f.refuseReports {
			f.mu.Unlock()
			writeProblem(w, Problem{Type: "about:blank", Title: "Service Unavailable", Status: 503, Detail: "restarting", Code: ProblemCodeUnavailable})
			return
		}
		f.reports[r.PathValue("run")] = body
		f.mu.Unlock()
		f.reported <- r.PathValue("run")
		writeJSON(w, http.StatusOK, DagRun{DagId: r.PathValue("dag"), RunId: r.PathValue("run"), State: DagRunState(body.State)})
	})
	return mux
}

func (f *fakeExecutorAPI) report(runID string) (DagRunPatch, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.reports[runID]
	return p, ok
}

func run(id int64, runID string) DagRun {
	return DagRun{Id: id, DagId: "sales", RunId: runID, State: DagRunStateQueued}
}

// startExecutor runs RunExecutor until the test ends, and answers its error.
func startExecutor(t *testing.T, c *Client, cfg ExecutorConfig, work func(context.Context, DagRun) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.RunExecutor(ctx, cfg, work) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("RunExecutor did not return after its context ended")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func awaitReport(t *testing.T, f *fakeExecutorAPI) string {
	t.Helper()
	select {
	case id := <-f.reported:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no report within 10s")
		return ""
	}
}

func TestRunExecutorReportsSuccessAndFailureWithWorkerID(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "ok"), run(2, "bad"), run(3, "panics"))
	c := serve(t, f.handler(), "")
	stop := startExecutor(t, c, ExecutorConfig{WorkerID: "w1", DagID: "sales", Limit: 2, IdleBackoff: time.Millisecond},
		func(ctx context.Context, r DagRun) error {
			switch r.RunId {
			case "bad":
				return errors.New("boom")
			case "panics":
				panic("kaboom")
			}
			return nil
		})
	for range 3 {
		awaitReport(t, f)
	}
	require.NoError(t, stop())
	for runID, want := range map[string]DagRunState{"ok": DagRunStateSuccess, "bad": DagRunStateFailed, "panics": DagRunStateFailed} {
		p, ok := f.report(runID)
		require.True(t, ok, runID)
		require.Equal(t, want, DagRunState(p.State), runID)
		require.Equal(t, "w1", *p.WorkerId)
	}
	bad, _ := f.report("bad")
	require.NotNil(t, bad.Note)
	require.Equal(t, "boom", *bad.Note, "a failure is reported with the work's error as its note")
	ok, _ := f.report("ok")
	require.Nil(t, ok.Note)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, "sales", *f.claims[0].DagId)
	require.Equal(t, 2, *f.claims[0].Limit)
	require.Equal(t, 60, *f.claims[0].LeaseSeconds)
}

func TestRunExecutorCancelsWorkWhenBackfillIsCanceling(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "long"))
	f.heartbeat = func(int64) (HeartbeatResponse, *Problem) {
		return HeartbeatResponse{LeaseExpiresAt: time.Now().Add(time.Minute), CancelRequested: true}, nil
	}
	c := serve(t, f.handler(), "")
	causes := make(chan error, 1)
	startExecutor(t, c, ExecutorConfig{WorkerID: "w1", HeartbeatEvery: 5 * time.Millisecond, IdleBackoff: time.Millisecond},
		func(ctx context.Context, r DagRun) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
	require.Equal(t, "long", awaitReport(t, f))
	require.ErrorIs(t, <-causes, ErrCancelRequested)
	p, _ := f.report("long")
	require.Equal(t, DagRunStateCanceled, DagRunState(p.State))
}

func TestRunExecutorDoesNotReportARunWhoseLeaseIsLost(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "lost"), run(2, "after"))
	f.heartbeat = func(id int64) (HeartbeatResponse, *Problem) {
		return HeartbeatResponse{}, &Problem{Type: "about:blank", Title: "Conflict", Status: 409, Detail: "gone", Code: ProblemCodeLeaseLost}
	}
	c := serve(t, f.handler(), "")
	causes := make(chan error, 2)
	startExecutor(t, c, ExecutorConfig{WorkerID: "w1", HeartbeatEvery: 5 * time.Millisecond, IdleBackoff: time.Millisecond},
		func(ctx context.Context, r DagRun) error {
			if r.RunId == "after" {
				return nil
			}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
	// The executor works one run at a time, so "after" is reported only once "lost" ended.
	require.Equal(t, "after", awaitReport(t, f))
	require.ErrorIs(t, <-causes, ErrLeaseLost)
	_, reported := f.report("lost")
	require.False(t, reported)
}

func TestRunExecutorReleasesWorkCutShortByShutdown(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "interrupted"))
	c := serve(t, f.handler(), "")
	started := make(chan struct{})
	stop := startExecutor(t, c, ExecutorConfig{WorkerID: "w1", IdleBackoff: time.Millisecond},
		func(ctx context.Context, r DagRun) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
	<-started
	require.NoError(t, stop())
	_, reported := f.report("interrupted")
	require.False(t, reported)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, []string{"1 w1"}, f.released, "the cut-short run is handed back by its worker")
}

func TestRunExecutorStopsWhenTheClaimIsRefused(t *testing.T) {
	t.Parallel()
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Type: "about:blank", Title: "Unauthorized", Status: 401, Detail: "no token", Code: ProblemCodeUnauthorized})
	}), "")
	err := c.RunExecutor(context.Background(), ExecutorConfig{WorkerID: "w1"}, func(context.Context, DagRun) error { return nil })
	require.True(t, IsCode(err, ProblemCodeUnauthorized), "err: %v", err)

	err = c.RunExecutor(context.Background(), ExecutorConfig{}, nil)
	require.ErrorContains(t, err, "WorkerID")
}

// A report that the service refuses for a while (a restart, a failover) is sent again for as
// long as the lease lasts, not a fixed five times: a run whose work is done is not run again
// because the service was away for seconds when it finished.
func TestRunExecutorReportRidesOutAnOutageWithinTheLease(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "finished"))
	f.refuseReports = 8
	c := serve(t, f.handler(), "")
	startExecutor(t, c, ExecutorConfig{WorkerID: "w1", IdleBackoff: time.Millisecond, reportWait: time.Millisecond},
		func(context.Context, DagRun) error { return nil })
	require.Equal(t, "finished", awaitReport(t, f))
	p, ok := f.report("finished")
	require.True(t, ok)
	require.Equal(t, DagRunStateSuccess, DagRunState(p.State))
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, 9, f.patches, "eight refusals, then the report that landed")
}

// Work told to stop keeps its lease while it stops: the heartbeats go on until it returns, so
// that the run is not handed to another worker while a program given SIGTERM uses its grace.
func TestRunExecutorHeartbeatsUntilStoppedWorkReturns(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "slow-to-stop"))
	c := serve(t, f.handler(), "")
	started := make(chan struct{})
	stop := startExecutor(t, c, ExecutorConfig{WorkerID: "w1", IdleBackoff: time.Millisecond, LeaseSeconds: 10, HeartbeatEvery: 20 * time.Millisecond},
		func(ctx context.Context, r DagRun) error {
			close(started)
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // its grace
			return ctx.Err()
		})
	<-started
	stopped := time.Now()
	require.NoError(t, stop())
	f.mu.Lock()
	defer f.mu.Unlock()
	after := 0
	for _, at := range f.beats {
		if at.After(stopped) {
			after++
		}
	}
	require.GreaterOrEqual(t, after, 5, "heartbeats while the stopped work took its grace")
	require.Equal(t, []string{"1 w1"}, f.released, "then the run is handed back")
}

// A failed run's note is text the service can store: a NUL or invalid UTF-8 in the work's
// error would make the service refuse the report (400), and the run would run again.
func TestRunExecutorReportsANoteWithoutNULOrInvalidUTF8(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "binary"))
	c := serve(t, f.handler(), "")
	startExecutor(t, c, ExecutorConfig{WorkerID: "w1", IdleBackoff: time.Millisecond},
		func(context.Context, DagRun) error { return errors.New("bad row a\x00b \xff end") })
	require.Equal(t, "binary", awaitReport(t, f))
	p, _ := f.report("binary")
	require.Equal(t, DagRunStateFailed, DagRunState(p.State))
	require.Equal(t, "bad row a\uFFFDb \uFFFD end", *p.Note)
}

// A heartbeat as long as the lease would let the lease run out between two heartbeats.
func TestRunExecutorRefusesAHeartbeatNoShorterThanTheLease(t *testing.T) {
	t.Parallel()
	c := serve(t, http.NotFoundHandler(), "")
	err := c.RunExecutor(context.Background(), ExecutorConfig{WorkerID: "w1", LeaseSeconds: 15, HeartbeatEvery: 15 * time.Second}, nil)
	require.ErrorContains(t, err, "HeartbeatEvery (15s) must be shorter than the lease (15s)")
}

// A stopping executor does not wait out the lease for a report the service refuses: once
// it is told to stop, the report gets what a release gets (releaseTimeout), and the run is
// left to its lease.
func TestRunExecutorStoppingGivesAReportNoMoreThanAReleaseGets(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "done-while-stopping"))
	f.refuseReports = 1 << 30
	c := serve(t, f.handler(), "")
	started := make(chan struct{})
	var ended RunOutcome
	stop := startExecutor(t, c, ExecutorConfig{WorkerID: "w1", IdleBackoff: time.Millisecond, reportWait: 50 * time.Millisecond,
		OnRunEnd: func(_ DagRun, o RunOutcome, _ string) { ended = o }},
		func(ctx context.Context, r DagRun) error {
			close(started)
			<-ctx.Done()
			return nil // it finished anyway: reported, not released
		})
	<-started
	began := time.Now()
	require.NoError(t, stop())
	took := time.Since(began)
	require.Less(t, took, releaseTimeout+time.Second, "not the lease's minute")
	require.Equal(t, OutcomeUnreported, ended)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Greater(t, f.patches, 3, "the report was sent again meanwhile")
}

// Claims and reports are per-run chatter: at the default INFO level an executor that runs
// runs logs nothing for them, and at DEBUG it logs each.
func TestRunExecutorLogsEachRunOnlyAtDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		f := newFakeExecutorAPI(run(1, "one"), run(2, "two"))
		c := serve(t, f.handler(), "")
		var out syncBuffer
		logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level}))
		stop := startExecutor(t, c, ExecutorConfig{WorkerID: "w1", Limit: 2, IdleBackoff: time.Millisecond, Logger: logger},
			func(context.Context, DagRun) error { return nil })
		awaitReport(t, f)
		awaitReport(t, f)
		require.NoError(t, stop())
		want := 0
		if level == slog.LevelDebug {
			want = 2
		}
		require.Equal(t, want, strings.Count(out.String(), "reported run"), "level %s: %s", level, out.String())
	}
}

// syncBuffer is a bytes.Buffer that the executor's goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

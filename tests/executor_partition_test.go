package tests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/stretchr/testify/require"
)

// partitionLease is the lease both executors ask for: short, so that a partition outlasts it
// within seconds.
const partitionLease = 10

// followRealTime makes the service's clock follow this machine's (it is stopped in tests) and
// sweeps, every 50 ms until the test ends: a lease then expires, and its run is handed out
// again, when a real service would do so, with the sweep as prompt as it can possibly be.
func followRealTime(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := pgtest.SetClock(ctx, e.DB, time.Now().UTC()); err == nil {
				_ = e.Sweep.RunOnce(ctx)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

// interval is when one executor's work on the run began and ended.
type interval struct {
	who        string
	start, end time.Time
}

// requireNoOverlap checks that A's work on the run had ended before B's began.
func requireNoOverlap(t *testing.T, a, b interval) {
	t.Helper()
	require.False(t, a.start.IsZero() || a.end.IsZero() || b.start.IsZero() || b.end.IsZero(),
		"every interval recorded: %+v %+v", a, b)
	require.True(t, a.end.Before(b.start), "A worked on the run until %s, B from %s: both at once for %s",
		a.end.Format(time.RFC3339Nano), b.start.Format(time.RFC3339Nano), a.end.Sub(b.start))
	t.Logf("A ran %s, stopped %s before B started", a.end.Sub(a.start).Round(time.Millisecond), b.start.Sub(a.end).Round(time.Millisecond))
}

// heartbeatSeen is a transport that closes answered once a heartbeat has been answered 200.
type heartbeatSeen struct {
	next     http.RoundTripper
	once     sync.Once
	answered chan struct{}
}

func (h *heartbeatSeen) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := h.next.RoundTrip(req)
	if err == nil && res.StatusCode == http.StatusOK && strings.HasSuffix(req.URL.Path, "/heartbeat") {
		h.once.Do(func() { close(h.answered) })
	}
	return res, err
}

// The lease is the executor's own deadline. Executor A is cut off from the service after its
// first answered heartbeat, while its work runs; its lease expires, the sweep hands the run to
// executor B, and B runs it. A must have stopped its work before B began, and must not report
// the run success. Through the Go SDK's RunExecutor with a Work func, and through
// `backfillctl executor` with a real program.
func TestExecutorPartitionedPastItsLeaseStopsBeforeTheRunIsHandedOut(t *testing.T) {
	t.Parallel()
	t.Run("SDKWork", func(t *testing.T) { t.Parallel(); testPartitionSDK(t) })
	t.Run("CLIProgram", func(t *testing.T) { t.Parallel(); testPartitionCLI(t, buildCLI(t)) })
}

func testPartitionSDK(t *testing.T) {
	e := newEnv(t)
	b := e.DailyBackfill("part_sdk", day(7, 1), day(7, 1))
	followRealTime(t, e)
	proxy := startPartitionProxy(t, strings.TrimPrefix(e.URL, "http://"))
	seen := &heartbeatSeen{next: http.DefaultTransport, answered: make(chan struct{})}
	ca, err := client.New(proxy.URL(), "", client.WithHTTPClient(&http.Client{Transport: seen, Timeout: 2 * time.Second}))
	require.NoError(t, err)
	cb, err := client.New(e.URL, "")
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		works    = map[string]*interval{"A": {who: "A"}, "B": {who: "B"}}
		outcomes = map[string]client.RunOutcome{}
	)
	record := func(who string, start bool) {
		mu.Lock()
		defer mu.Unlock()
		if start {
			works[who].start = time.Now()
		} else {
			works[who].end = time.Now()
		}
	}
	cfg := func(who string) client.ExecutorConfig {
		return client.ExecutorConfig{
			WorkerID: who, DagID: "part_sdk", LeaseSeconds: partitionLease, HeartbeatEvery: 2 * time.Second,
			IdleBackoff: 50 * time.Millisecond, MaxIdleBackoff: 100 * time.Millisecond,
			OnRunEnd: func(_ client.DagRun, o client.RunOutcome, _ string) {
				mu.Lock()
				outcomes[who] = o
				mu.Unlock()
			},
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopA()
	defer stopB()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() {
		doneA <- ca.RunExecutor(ctxA, cfg("A"), func(ctx context.Context, _ client.DagRun) error {
			record("A", true)
			defer record("A", false)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Minute):
				return nil
			}
		})
	}()
	select {
	case <-seen.answered:
	case <-time.After(30 * time.Second):
		t.Fatal("A's first heartbeat was never answered")
	}
	proxy.Cut()
	go func() {
		doneB <- cb.RunExecutor(ctxB, cfg("B"), func(ctx context.Context, _ client.DagRun) error {
			record("B", true)
			defer record("B", false)
			time.Sleep(300 * time.Millisecond)
			return nil
		})
	}()
	require.Eventually(t, func() bool { return runStates(t, e.DB, b.Id)["success"] == 1 }, 40*time.Second, 50*time.Millisecond)
	proxy.Heal()
	stopB()
	stopA()
	require.NoError(t, <-doneB)
	require.NoError(t, <-doneA)

	mu.Lock()
	defer mu.Unlock()
	requireNoOverlap(t, *works["A"], *works["B"])
	require.Equal(t, client.OutcomeLeaseLost, outcomes["A"], "A neither reports the run nor takes it back")
	require.Equal(t, client.OutcomeSuccess, outcomes["B"])
	var worker string
	var attempt int
	require.NoError(t, e.DB.QueryRow(`SELECT worker_id, attempt FROM dag_runs WHERE backfill_id = $1`, b.Id).Scan(&worker, &attempt))
	require.Equal(t, "B", worker, "the success is B's")
	require.Equal(t, 2, attempt)
}

// programIntervals reads the lines "WHO start|end UNIXNANO" the programs appended to path.
func programIntervals(t *testing.T, path string) map[string]*interval {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]*interval{"A": {who: "A"}, "B": {who: "B"}}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, "line %q", line)
		ns, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		at := time.Unix(0, ns)
		switch f[1] {
		case "start":
			out[f[0]].start = at
		case "end":
			out[f[0]].end = at
		}
	}
	return out
}

func testPartitionCLI(t *testing.T, bin string) {
	e := newEnv(t)
	b := e.DailyBackfill("part_cli", day(7, 1), day(7, 1))
	followRealTime(t, e)
	proxy := startPartitionProxy(t, strings.TrimPrefix(e.URL, "http://"))
	log := filepath.Join(t.TempDir(), "intervals")
	// A program that runs until it is stopped, and says when it began and ended; B's ends on
	// its own after 300 ms.
	script := `echo "$2 start $(date +%s%N)" >> "$1"
trap 'echo "$2 end $(date +%s%N)" >> "$1"; exit 143' TERM
if [ "$2" = B ]; then sleep 0.3; echo "$2 end $(date +%s%N)" >> "$1"; exit 0; fi
sleep 120 & wait`
	args := func(who, server string) []string {
		return []string{"--server", server, "executor", "-o", "json", "--worker-id", who, "--dag-id", "part_cli",
			"--lease-seconds", strconv.Itoa(partitionLease), "--heartbeat", "2s", "--grace", "1s",
			"--", "sh", "-c", script, "sh", log, who}
	}
	cmdA, doneA := startExecutor(t, bin, e, args("A", proxy.URL())...)
	// Cut A off once a heartbeat has moved its lease: the service's clock follows real time,
	// so a renewal shows as a later lease end.
	var first time.Time
	require.Eventually(t, func() bool {
		var end *time.Time
		if err := e.DB.QueryRow(`SELECT lease_expires_at FROM dag_runs WHERE backfill_id = $1`, b.Id).Scan(&end); err != nil || end == nil {
			return false
		}
		if first.IsZero() {
			first = *end
		}
		return end.Sub(first) > time.Second
	}, 30*time.Second, 20*time.Millisecond, "A's run was never claimed and renewed")
	proxy.Cut()
	cmdB, doneB := startExecutor(t, bin, e, args("B", e.URL)...)
	require.Eventually(t, func() bool { return runStates(t, e.DB, b.Id)["success"] == 1 }, 40*time.Second, 50*time.Millisecond)
	proxy.Heal()
	require.NoError(t, cmdB.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmdA.Process.Signal(syscall.SIGTERM))
	rB, rA := <-doneB, <-doneA
	require.Equal(t, 0, rA.code, "stderr: %s", rA.stderr)
	require.Equal(t, 0, rB.code, "stderr: %s", rB.stderr)

	got := programIntervals(t, log)
	requireNoOverlap(t, *got["A"], *got["B"])
	linesA := execLines(t, rA.stdout)
	require.Len(t, linesA, 2, "A: %s", rA.stdout)
	require.Equal(t, "lease_lost", linesA[1].Outcome, "A neither reports the run nor takes it back")
	linesB := execLines(t, rB.stdout)
	require.Len(t, linesB, 2, "B: %s", rB.stdout)
	require.Equal(t, "success", linesB[1].Outcome)
	var worker string
	require.NoError(t, e.DB.QueryRow(`SELECT worker_id FROM dag_runs WHERE backfill_id = $1`, b.Id).Scan(&worker))
	require.Equal(t, "B", worker, "the success is B's")
}

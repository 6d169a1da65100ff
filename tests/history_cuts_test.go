package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/stretchr/testify/require"
)

// The history checker: clients create backfills, manual runs and webhooks, PATCH backfills,
// and executors (the SDK's RunExecutor) claim, heartbeat and report, all against a service
// whose store reaches PostgreSQL through a proxy that cuts connections at random (seeded).
// Every request and answer is recorded; at the end the history is checked against the
// database (history_check_test.go).
//
// The default is CI-sized. HISTORY_SEEDS (a count, or a comma-separated list), HISTORY_SECONDS
// and HISTORY_MODES (after-commit, chaos) make it longer: `make chaos`.

// historyParams are one history's settings, printed so that a failure replays.
type historyParams struct {
	Seed      uint64
	Mode      string // after-commit: answers lost after each write's commit; chaos: any cut
	P         float64
	Duration  time.Duration
	Creators  int
	Executors int
}

func historyRuns(t *testing.T) []historyParams {
	seeds := []uint64{1}
	if s := os.Getenv("HISTORY_SEEDS"); s != "" {
		seeds = nil
		if n, err := strconv.Atoi(s); err == nil {
			for i := 1; i <= n; i++ {
				seeds = append(seeds, uint64(i))
			}
		} else {
			for _, part := range strings.Split(s, ",") {
				v, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
				require.NoError(t, err, "HISTORY_SEEDS")
				seeds = append(seeds, v)
			}
		}
	}
	dur := 4 * time.Second
	if s := os.Getenv("HISTORY_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "HISTORY_SECONDS")
		dur = time.Duration(n) * time.Second
	}
	modes := []string{"after-commit", "chaos"}
	if s := os.Getenv("HISTORY_MODES"); s != "" {
		modes = strings.Split(s, ",")
	}
	var out []historyParams
	for _, seed := range seeds {
		for _, m := range modes {
			p := 0.3 // of the commits of writes
			if m == "chaos" {
				p = 0.01 // of every query, commit, tag and ReadyForQuery
			}
			out = append(out, historyParams{Seed: seed, Mode: m, P: p, Duration: dur, Creators: 3, Executors: 3})
		}
	}
	return out
}

// faultRule is the proxy's rule for a history.
func faultRule(hp historyParams) pgproxy.Rule {
	if hp.Mode == "chaos" {
		return pgproxy.Chaos(hp.Seed, hp.P)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(hp.Seed, 0x5eed))
	return pgproxy.AnswerLostAfter(func(ev pgproxy.Event) bool {
		write := false
		for _, tag := range ev.Tags {
			write = write || pgproxy.IsWriteTag(tag)
		}
		if !write {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64() < hp.P
	})
}

func TestHistoryUnderCutConnectionsEndsExactlyOnce(t *testing.T) {
	for _, hp := range historyRuns(t) {
		t.Run(fmt.Sprintf("%s/seed=%d", hp.Mode, hp.Seed), func(t *testing.T) {
			t.Parallel()
			runHistory(t, hp)
		})
	}
}

func runHistory(t *testing.T, hp historyParams) {
	t.Logf("history: %+v", hp)
	var proxy *pgproxy.Proxy
	e := newEnv(t, withStoreDSN(func(dsn string) string {
		proxy = pgproxy.Start(t, hostPort(t, dsn))
		return proxy.DSN(t, dsn)
	}))
	installLeaseAudit(t, e)
	rec := &recorder{}
	var execs executions
	newClient := func(name string) *client.Client {
		c, err := client.New(e.URL, "", client.WithHTTPClient(rec.client(name, e.HTTP.Transport)))
		require.NoError(t, err)
		// Short waits: the faults are short, and the history should be long.
		c.Retry = client.RetryPolicy{Attempts: 40, Base: 5 * time.Millisecond, Max: 100 * time.Millisecond}
		return c
	}
	for i := range hp.Creators {
		e.PutDag(fmt.Sprintf("m%d", i), "@daily", "")
	}

	// The sweep finishes backfills throughout, through the proxy like everything else.
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	var sweeping sync.WaitGroup
	sweeping.Go(func() {
		for sleep(sweepCtx, 100*time.Millisecond) {
			_ = e.Sweep.RunOnce(sweepCtx)
		}
	})
	execCtx, stopExecutors := context.WithCancel(context.Background())
	var executing sync.WaitGroup
	for j := range hp.Executors {
		worker := fmt.Sprintf("w%d", j)
		c := newClient(worker)
		rng := rand.New(rand.NewPCG(hp.Seed, uint64(100+j)))
		var rngMu sync.Mutex
		executing.Go(func() {
			err := c.RunExecutor(execCtx, client.ExecutorConfig{
				WorkerID: worker, Limit: 3, LeaseSeconds: 10, HeartbeatEvery: 100 * time.Millisecond,
				IdleBackoff: 10 * time.Millisecond, MaxIdleBackoff: 100 * time.Millisecond,
			}, func(ctx context.Context, run client.DagRun) error {
				rngMu.Lock()
				d, fail := time.Duration(rng.IntN(250))*time.Millisecond, rng.IntN(10) == 0
				rngMu.Unlock()
				x := execution{RunID: run.Id, Worker: worker, Attempt: int(run.Attempt), Start: time.Now()}
				sleep(ctx, d)
				x.End, x.Failed = time.Now(), fail
				execs.add(x)
				if fail {
					return fmt.Errorf("failed on purpose")
				}
				return nil
			})
			if err != nil {
				t.Errorf("executor %s: %v", worker, err)
			}
		})
	}

	proxy.SetRule(faultRule(hp))
	deadline := time.Now().Add(hp.Duration)
	var creating sync.WaitGroup
	for i := range hp.Creators {
		c := newClient(fmt.Sprintf("c%d", i))
		creating.Go(func() { createLoop(t, e, c, hp, i, deadline) })
	}
	creating.Wait()
	proxy.SetRule(nil)
	t.Logf("faults fired: %d", proxy.Fired())

	// Without faults, the executors work off what is left, for as long as they make progress:
	// what this checks is that no run is left stuck, not how fast 3 executors drain what 3
	// creators made in the faults' time (a heavy seed left 588 runs after a fixed minute on 2
	// cores, still being worked off). A stall of 15 s, or 5 minutes in all, ends the wait.
	unfinished := func() int {
		return e.Count(`SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')`)
	}
	left, lastProgress, giveUp := unfinished(), time.Now(), time.Now().Add(5*time.Minute)
	for left > 0 && time.Since(lastProgress) < 15*time.Second && time.Now().Before(giveUp) {
		time.Sleep(50 * time.Millisecond)
		if n := unfinished(); n < left {
			left, lastProgress = n, time.Now()
		}
	}
	stopExecutors()
	executing.Wait()
	stopSweep()
	sweeping.Wait()
	e.SweepOnce()

	if os.Getenv("HISTORY_DUMP") != "" { // every unknown outcome, to read a failure
		for _, x := range rec.history() {
			if x.unknown() {
				t.Logf("%s %s %s key=%q %d %s %s", x.Client, x.Method, x.Path, x.Key, x.Status, x.RespBody, x.Err)
			}
		}
	}
	f := checkHistory(t, e, rec.history(), execs.all)
	t.Logf("%s seed %d: %d requests (%d answered 503 or not at all), %d keys, %d sent again after an unknown outcome "+
		"(%d ended exactly once), %d leases, %d executions, %d cuts; double effects %d, missing %d, false details %d, "+
		"unhanded leases %d, overlaps %d, final %d",
		hp.Mode, hp.Seed, f.Requests, f.Unknown, f.Keys, f.Retried, f.EndedOnce, f.Leases, f.Execs, proxy.Fired(),
		len(f.DoubleEffects), len(f.Missing), len(f.FalseDetails), len(f.Unhanded), len(f.Overlaps), len(f.Final))
	require.Empty(t, f.Violations.all(), "history %+v", hp)
	require.Positive(t, proxy.Fired(), "the faults must have fired")
}

// createLoop is one client making changes until deadline: backfills of fresh DAGs, manual
// runs, webhooks and PATCHes, each creation named by its key so that the check finds it.
func createLoop(t *testing.T, e *env, c *client.Client, hp historyParams, i int, deadline time.Time) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(hp.Seed, uint64(i)))
	var backfills []int64
	for n := 0; time.Now().Before(deadline); n++ {
		key := fmt.Sprintf("%s-%d-c%d-%d", hp.Mode, hp.Seed, i, n)
		switch op := rng.IntN(10); {
		case op < 3:
			dag := fmt.Sprintf("b%d_%d", i, n)
			if _, _, err := retry503(ctx, func() (client.Dag, bool, error) {
				return c.PutDag(ctx, dag, client.DagPut{Schedule: "@daily"})
			}); err != nil {
				continue // the DAG may not exist: the next creation takes a new one
			}
			mar := int32(1 + rng.IntN(3))
			b, err := c.CreateBackfill(ctx, client.BackfillCreate{
				DagId: dag, FromDate: day(1, 1), ToDate: day(1, 4), MaxActiveRuns: &mar, Description: &key,
			}, client.CreateOptions{IdempotencyKey: key})
			if err == nil {
				backfills = append(backfills, b.Id)
			}
		case op < 6:
			conf := client.Conf(`{"k":"` + key + `"}`)
			_, _ = c.CreateDagRun(ctx, fmt.Sprintf("m%d", i), client.DagRunCreate{
				LogicalDate: day(1, 1).AddDate(0, 0, n), Conf: &conf,
			}, client.KeyOptions{IdempotencyKey: key})
		case op < 7:
			url := "https://example.com/" + key
			_, _ = c.CreateWebhook(ctx, client.WebhookCreate{Url: url, Description: &key}, client.KeyOptions{IdempotencyKey: key})
		case len(backfills) > 0:
			id := backfills[rng.IntN(len(backfills))]
			_, _, _ = retry503(ctx, func() (client.Backfill, bool, error) {
				b, err := c.PatchBackfill(ctx, id, client.BackfillChanges{MaxActiveRuns: client.Set(int32(1 + rng.IntN(4)))})
				return b, false, err
			})
		}
	}
}

// retry503 sends a request that is safe to repeat (a PUT, a PATCH to a value) until it is
// answered other than 503, a few times.
func retry503[T any](ctx context.Context, call func() (T, bool, error)) (T, bool, error) {
	for attempt := 1; ; attempt++ {
		v, b, err := call()
		if err == nil || attempt == 20 || !client.Retryable(err) {
			return v, b, err
		}
		sleep(ctx, 10*time.Millisecond)
	}
}

// hostPort is the host:port of a postgres:// DSN.
func hostPort(t testing.TB, dsn string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(dsn, "postgres://")
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "postgresql://")
	}
	require.True(t, ok, "a URL DSN: %s", dsn)
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	if slash := strings.IndexAny(rest, "/?"); slash >= 0 {
		rest = rest[:slash]
	}
	return rest
}

// sleep waits d or until ctx ends; it reports whether it waited the whole d.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

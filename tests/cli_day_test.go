package tests

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// TestCLIOperatorDay runs backfillctl as a subprocess for what a new operator met in a day:
// the rate of watch, a --wait that meets the failure budget, the runs commands, and the
// error messages of mistakes.
func TestCLIOperatorDay(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	t.Run("WatchShowsTheLiveRate", func(t *testing.T) { t.Parallel(); testCLIWatchRate(t, bin) })
	t.Run("WaitExitsFourOnBudgetPause", func(t *testing.T) { t.Parallel(); testCLIWaitBudgetPause(t, bin) })
	t.Run("RunsCommandsAndStateFilters", func(t *testing.T) { t.Parallel(); testCLIRuns(t, bin) })
	t.Run("MistakesGetOneMessage", func(t *testing.T) { t.Parallel(); testCLIMistakes(t, bin) })
}

var cliRate = regexp.MustCompile(`(\d+\.\d) runs/s`)

// A watch that starts on a backfill already half an hour... here a few seconds, into its
// work shows the pace it sees live, not the replayed creation snapshot against the current
// counts. The true rate is read from the service at the watch's start and end.
func testCLIWatchRate(t *testing.T, bin string) {
	e := newEnv(t)
	c := e.sdk(t)
	// 744 hourly runs: at the executor's 50 runs a second at most, still running when the
	// watch gives up 9 s from now (366 daily runs finished before it did).
	_, _, err := c.PutDag(context.Background(), "rate_dag", client.DagPut{Schedule: "@hourly"})
	require.NoError(t, err)
	b, err := c.CreateBackfill(context.Background(), client.BackfillCreate{DagId: "rate_dag", FromDate: day(1, 1), ToDate: day(1, 31)}, client.CreateOptions{})
	require.NoError(t, err)
	completeRuns(t, e, c, "rate_dag", nil) // one run per 20 ms tick at most
	time.Sleep(3 * time.Second)            // the backfill has been running a while when the watch starts

	start, err := c.GetBackfill(context.Background(), b.Id)
	require.NoError(t, err)
	began := time.Now()
	r := runCLI(t, bin, e, "watch", strconv.FormatInt(b.Id, 10), "--interval", "1s", "--timeout", "6s")
	end, err := c.GetBackfill(context.Background(), b.Id)
	require.NoError(t, err)
	trueRate := float64(end.Progress.Done()-start.Progress.Done()) / time.Since(began).Seconds()
	require.Equal(t, 3, r.code, "a watch that times out: %s\n%s", r.stderr, r.stdout)
	require.Contains(t, r.stderr, "gave up watching")
	m := cliRate.FindAllStringSubmatch(r.stdout, -1)
	require.NotEmpty(t, m, r.stdout)
	shown, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	require.NoError(t, err)
	t.Logf("true rate %.1f runs/s, watch showed %.1f runs/s\n%s", trueRate, shown, r.stdout)
	require.Greater(t, trueRate, 1.0, "the executor made progress")
	require.InDelta(t, 1.0, shown/trueRate, 0.5, "within 2x: shown %.1f, true %.1f", shown, trueRate)
	require.Regexp(t, `(?m)^\S+ running .*-- runs/s`, r.stdout, "no rate before two live readings")
}

// --wait on a backfill that the failure budget pauses stops with exit code 4, says why in
// numbers and what to do; --wait-through-pause keeps waiting.
func testCLIWaitBudgetPause(t *testing.T, bin string) {
	e := newEnv(t)
	c := e.sdk(t)
	_, _, err := c.PutDag(context.Background(), "budget_dag", client.DagPut{Schedule: "@daily"})
	require.NoError(t, err)
	completeRuns(t, e, c, "budget_dag", func(client.DagRun) bool { return true })
	r := runCLI(t, bin, e, "backfills", "create", "--dag-id", "budget_dag", "--from-date", "2024-06-01",
		"--to-date", "2024-06-10", "--max-failed-runs", "3", "--wait")
	require.Equal(t, 4, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "backfill 1 paused by the failure budget: 3 failed ≥ max_failed_runs 3")
	require.Contains(t, r.stdout, "backfillctl backfills runs 1 --state failed")
	require.Contains(t, r.stdout, "backfillctl backfills unpause 1")

	// Through the pause: an unpause later lets the wait go on to the end (canceled here).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan cliResult, 1)
	go func() { done <- runCLI(t, bin, e, "watch", "1", "--wait-through-pause") }()
	time.Sleep(time.Second)
	select {
	case got := <-done:
		t.Fatalf("the watch ended during the pause: %+v", got)
	default:
	}
	_, err = c.CancelBackfill(ctx, 1)
	require.NoError(t, err)
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the watch did not end after the cancel")
	}
	require.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Regexp(t, `backfill 1 canceled: .* in \d`, r.stdout)
}

// runs list|get|claim|heartbeat|report|release, and --state on backfills runs.
func testCLIRuns(t *testing.T, bin string) {
	e := newEnv(t)
	okCLI(t, bin, e, "dags", "put", "runs_dag", "--schedule", "@daily")
	okCLI(t, bin, e, "backfills", "create", "--dag-id", "runs_dag", "--from-date", "2024-06-01", "--to-date", "2024-06-05")
	out := okCLI(t, bin, e, "runs", "claim", "--worker-id", "me", "--dag-id", "runs_dag", "--limit", "2")
	require.Regexp(t, `(?m)^1\s+backfill__2024-06-01T00:00:00Z\s+2024-06-01T00:00:00Z\s+running\s+1\s+me\s+1`, out)
	require.Contains(t, okCLI(t, bin, e, "runs", "heartbeat", "1", "--worker-id", "me"), "run 1: lease extended")
	out = okCLI(t, bin, e, "runs", "report", "runs_dag", "backfill__2024-06-01T00:00:00Z", "--state", "failed", "--worker-id", "me", "--note", "disk full")
	require.Regexp(t, `failed\s+1\s+me\s+1\s+disk full`, out)
	out = okCLI(t, bin, e, "runs", "release", "2", "--worker-id", "me")
	require.Regexp(t, `queued`, out)
	out = okCLI(t, bin, e, "runs", "get", "runs_dag", "backfill__2024-06-01T00:00:00Z")
	require.Contains(t, out, "disk full")
	out = okCLI(t, bin, e, "runs", "list", "runs_dag", "--state", "queued", "--limit", "2")
	require.Regexp(t, `(?m)^\(more: add --cursor \S+\)$`, out)
	next := regexp.MustCompile(`--cursor (\S+)\)`).FindStringSubmatch(out)[1]
	out2 := okCLI(t, bin, e, "runs", "list", "runs_dag", "--state", "queued", "--limit", "2", "--cursor", next)
	require.Contains(t, out2, "2024-06-04")
	require.NotContains(t, out2, "(more")
	out = okCLI(t, bin, e, "backfills", "runs", "1", "--state", "failed")
	require.Regexp(t, `(?m)^1\s+2024-06-01T00:00:00Z\s+\S+\s+failed\s+1\s+-\s+disk full$`, out)
	require.NotContains(t, out, "2024-06-02")
	r := runCLI(t, bin, e, "runs", "list", "runs_dag", "--state", "done")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "--state must be one of queued, running, success, failed, canceled")
}

// A mistake gets one message that names it, and the usage only when it is asked for.
func testCLIMistakes(t *testing.T, bin string) {
	e := newEnv(t)
	okCLI(t, bin, e, "dags", "put", "m_dag", "--schedule", "@daily")
	r := runCLI(t, bin, e, "backfills", "create", "--dag-id", "m_dag", "--from-date", "2024-06-01", "--to-date", "2024-06-05", "--max-active-runs", "0")
	require.Equal(t, 3, r.code)
	require.Len(t, regexp.MustCompile(`must be at least 1`).FindAllStringIndex(r.stderr, -1), 1, r.stderr)

	r = runCLI(t, bin, e, "dags", "list", "--limt", "5")
	require.Equal(t, 3, r.code)
	require.Equal(t, "backfillctl dags list: flag provided but not defined: --limt; did you mean --limit?\nRun 'backfillctl dags list -h' for usage.\n", r.stderr)

	r = runCLI(t, bin, e, "backfills")
	require.Equal(t, 3, r.code)
	require.NotContains(t, r.stderr, "unknown command")
	require.Contains(t, r.stderr, "backfills create --dag-id")
	require.NotContains(t, r.stderr, "dags put")

	r = runCLI(t, bin, e, "runs", "list", "-h")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "Usage: backfillctl runs list")

	dead := httptest.NewServer(nil)
	url := dead.URL
	dead.Close()
	r = runCLI(t, bin, e, "--server", url, "dags", "list")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "hint: is the service running at "+url+"? set --server or BACKFILL_SERVER")
}

package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// TestCLI builds cmd/backfillctl once and runs it as a subprocess against real services:
// plain commands over pipes, and `create --wait` in a real pseudo-terminal.
func TestCLI(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)

	t.Run("CommandsTablesJSONAndExitCodes", func(t *testing.T) { t.Parallel(); testCLICommands(t, bin) })
	t.Run("TokenFromFlagOrEnvironment", func(t *testing.T) { t.Parallel(); testCLIToken(t, bin) })
	t.Run("TerminalProgressBarUntilSucceeded", func(t *testing.T) { t.Parallel(); testCLITerminal(t, bin, false) })
	t.Run("TerminalProgressBarExitsOneWhenFailed", func(t *testing.T) { t.Parallel(); testCLITerminal(t, bin, true) })
	t.Run("DemoExecutorFinishesABackfill", func(t *testing.T) { t.Parallel(); testCLIExecutor(t, bin) })
	t.Run("OperatorPatchRetryPlanNotesDelete", func(t *testing.T) { t.Parallel(); testCLIOperator(t, bin) })
	t.Run("ChosenDatesCodeRefActorReason", func(t *testing.T) { t.Parallel(); testCLIChosenDates(t, bin) })
}

// buildCLI compiles backfillctl into a directory that outlives the subtests.
func buildCLI(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the CLI tests build cmd/backfillctl with the go command")
	bin := filepath.Join(t.TempDir(), "backfillctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/backfillsvc/backfill/cmd/backfillctl").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// cliEnv is the environment of a backfillctl subprocess: the caller's, without its
// BACKFILL_* settings, plus extra "K=V" pairs.
func cliEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BACKFILL_") && !strings.HasPrefix(kv, "TERM=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs backfillctl against e with pipes (not a terminal) and a deadline.
func runCLI(t *testing.T, bin string, e *env, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cliEnv("BACKFILL_SERVER=" + e.URL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		require.NoError(t, err)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// ok runs a command that must succeed and answers its stdout.
func okCLI(t *testing.T, bin string, e *env, args ...string) string {
	t.Helper()
	r := runCLI(t, bin, e, args...)
	require.Equal(t, 0, r.code, "backfillctl %q\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	return r.stdout
}

var cliIDLine = regexp.MustCompile(`(?m)^ID:\s+(\d+)$`)

func testCLICommands(t *testing.T, bin string) {
	e := newEnv(t)

	out := okCLI(t, bin, e, "dags", "put", "cli_dag", "--schedule", "@daily", "--timezone", "UTC", "--description", "from the CLI")
	require.Regexp(t, `(?m)^DAG_ID\s+SCHEDULE\s+TIMEZONE`, out)
	require.Regexp(t, `(?m)^cli_dag\s+@daily\s+UTC\s+16\s+false\s+-\s+from the CLI$`, out)
	var dag client.Dag
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "-o", "json", "dags", "get", "cli_dag")), &dag))
	require.Equal(t, "@daily", dag.Schedule)
	require.Contains(t, okCLI(t, bin, e, "dags", "list"), "cli_dag")

	window := []string{"--dag-id", "cli_dag", "--from-date", "2024-01-01", "--to-date", "2024-01-05"}
	out = okCLI(t, bin, e, append([]string{"backfills", "dry-run"}, window...)...)
	require.Contains(t, out, "5 slots: 5 create, 0 reprocess, 0 skip")

	out = okCLI(t, bin, e, append([]string{"backfills", "create", "--idempotency-key", "cli-jan", "--max-active-runs", "2",
		"--dag-run-conf", `{"a":1}`}, window...)...)
	m := cliIDLine.FindStringSubmatch(out)
	require.NotNil(t, m, "create prints the backfill: %s", out)
	id := m[1]
	require.Regexp(t, `(?m)^PROGRESS:\s+0/5 done \(0%\)$`, out)
	require.Regexp(t, `(?m)^DAG RUN CONF:\s+\{"a":1\}$`, out)

	// The same key and request: the same backfill, as JSON this time.
	var replay client.Backfill
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, append([]string{"backfills", "create", "-o", "json",
		"--idempotency-key", "cli-jan", "--max-active-runs", "2", "--dag-run-conf", `{"a":1}`}, window...)...)), &replay))
	require.Equal(t, id, strconv.FormatInt(replay.Id, 10))

	// Another window while this one is active: 409, exit code 3, the problem on stderr.
	r := runCLI(t, bin, e, "backfills", "create", "--dag-id", "cli_dag", "--from-date", "2024-02-01", "--to-date", "2024-02-03")
	require.Equal(t, 3, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "backfill_already_running (409)")
	require.Contains(t, r.stderr, "(active backfill "+id+")")

	var list client.BackfillCollection
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "backfills", "list", "--active", "-o", "json")), &list))
	require.EqualValues(t, 1, list.TotalEntries)
	require.Regexp(t, `(?m)^`+id+`\s+cli_dag\s+running\s+0\s+2024-01-01T00:00:00Z\s+2024-01-05T00:00:00Z\s+0/5\s`, okCLI(t, bin, e, "backfills", "list"))
	require.Contains(t, okCLI(t, bin, e, "backfills", "list", "--active=false"), "ID  ")
	// Newest first by default: a second DAG's backfill is listed above the first one.
	okCLI(t, bin, e, "dags", "put", "cli_dag2", "--schedule", "@daily")
	newer := cliIDLine.FindStringSubmatch(okCLI(t, bin, e, "backfills", "create", "--dag-id", "cli_dag2",
		"--from-date", "2024-01-01", "--to-date", "2024-01-02"))
	require.NotNil(t, newer)
	require.Regexp(t, `(?s)^ID\s.*\n`+newer[1]+`\s+cli_dag2\s.*\n`+id+`\s+cli_dag\s`, okCLI(t, bin, e, "backfills", "list"))

	out = okCLI(t, bin, e, "backfills", "runs", id, "--limit", "2")
	require.Regexp(t, `(?m)^1\s+2024-01-01T00:00:00Z\s+backfill__2024-01-01T00:00:00Z\s+queued\s+1\s+-\s+-$`, out)
	require.Contains(t, out, "(1-2 of 5; see --limit and --offset)")

	require.Regexp(t, `(?m)^STATE:\s+paused \(user\)$`, okCLI(t, bin, e, "backfills", "pause", id))
	require.Regexp(t, `(?m)^STATE:\s+running$`, okCLI(t, bin, e, "backfills", "unpause", id))
	require.Regexp(t, `(?m)^STATE:\s+canceled$`, okCLI(t, bin, e, "backfills", "cancel", id))

	// Watching a canceled backfill: plain lines (no terminal), exit code 2.
	r = runCLI(t, bin, e, "watch", id)
	require.Equal(t, 2, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stdout, "backfill "+id+" canceled: 5/5 done (success 0, failed 0, canceled 5, skipped 0)")
	require.NotContains(t, r.stdout, "\r")

	r = runCLI(t, bin, e, "backfills", "pause", id)
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "backfill_not_active (409)")
	r = runCLI(t, bin, e, "backfills", "get", "999")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "backfill_not_found (404)")
	r = runCLI(t, bin, e, "backfills", "create", "--dag-id", "cli_dag", "--from-date", "2024-01-05", "--to-date", "2024-01-01")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "invalid_backfill (422)")
}

func testCLIToken(t *testing.T, bin string) {
	e := newEnv(t, withTokens("cli-token"))
	r := runCLI(t, bin, e, "dags", "list")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "unauthorized (401)")
	require.Contains(t, okCLI(t, bin, e, "dags", "list", "--token", "cli-token"), "DAG_ID")
}

// completeRuns plays an executor over the API until the test ends: it claims one run of the
// DAG per tick, reports it (failed when fail says so), and sweeps, so that the backfill moves
// at a pace the progress bar can be seen to follow.
func completeRuns(t *testing.T, e *env, c *client.Client, dagID string, fail func(client.DagRun) bool) {
	e.everyTick(t, 20*time.Millisecond, "completing runs", func(ctx context.Context) error {
		runs, err := c.ClaimRuns(ctx, client.ClaimRequest{WorkerId: "test-worker", Limit: sdkPtr(1), DagId: &dagID}, client.KeyOptions{})
		if err != nil {
			return err
		}
		for _, run := range runs {
			state := client.DagRunStateSuccess
			if fail != nil && fail(run) {
				state = client.DagRunStateFailed
			}
			if _, err = c.ReportRun(ctx, run.DagId, run.RunId, client.RunReport{State: state, WorkerID: "test-worker"}); err != nil {
				return err
			}
		}
		return e.Sweep.RunOnce(ctx)
	})
}

// testCLITerminal runs `backfills create --wait` in a pseudo-terminal while the test
// completes the runs, and reads what the terminal showed.
func testCLITerminal(t *testing.T, bin string, withFailure bool) {
	e := newEnv(t)
	c := e.sdk(t)
	_, _, err := c.PutDag(context.Background(), "tty_dag", client.DagPut{Schedule: "@daily"})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	completeRuns(t, e, c, "tty_dag", func(r client.DagRun) bool {
		return withFailure && r.LogicalDate.Equal(day(6, 4))
	})

	cmd := exec.CommandContext(ctx, bin, "backfills", "create", "--dag-id", "tty_dag",
		"--from-date", "2024-06-01", "--to-date", "2024-06-10", "--wait", "--interval", "30ms")
	cmd.Env = cliEnv("BACKFILL_SERVER="+e.URL, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
	require.NoError(t, err)
	defer ptmx.Close()
	var screen bytes.Buffer
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(&screen, ptmx)
		read <- err
	}()
	waitErr := cmd.Wait()
	select {
	case <-read: // EIO once the terminal's last writer is gone and its output drained
	case <-ctx.Done():
		t.Fatal("the terminal's output did not end")
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		require.NoError(t, waitErr)
	}
	out := screen.String()
	t.Logf("terminal session:\n%q", out)

	require.Contains(t, out, "backfill 1 created: 10 runs of tty_dag")
	require.Contains(t, out, "\x1b[1A\x1b[2K", "the progress is redrawn in place")
	require.Regexp(t, `running\s+\[█*░+\]\s+\d+%\s+\d/10`, out, "a bar while the backfill runs")
	require.Contains(t, out, "100%  10/10")
	require.Regexp(t, `runs/s`, out)
	if withFailure {
		require.Equal(t, 1, cmd.ProcessState.ExitCode())
		require.Contains(t, out, "backfill 1 failed: 10/10 done (success 9, failed 1, canceled 0, skipped 0)")
		return
	}
	require.Equal(t, 0, cmd.ProcessState.ExitCode())
	require.Contains(t, out, "backfill 1 succeeded: 10/10 done (success 10, failed 0, canceled 0, skipped 0)")
}

// testCLIExecutor is the README's walk-through: the demo executor in the background, a
// backfill created with --wait in the foreground.
func testCLIExecutor(t *testing.T, bin string) {
	e := newEnv(t)
	e.sweepInBackground(t)
	okCLI(t, bin, e, "dags", "put", "demo", "--schedule", "0 2 * * *", "--timezone", "America/New_York")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	worker := exec.CommandContext(ctx, bin, "executor", "--worker-id", "cli-w1", "--sleep", "5ms", "--limit", "3", "--verbose")
	worker.Env = cliEnv("BACKFILL_SERVER=" + e.URL)
	var workerLog bytes.Buffer
	worker.Stdout, worker.Stderr = &workerLog, &workerLog
	require.NoError(t, worker.Start())

	r := runCLI(t, bin, e, "backfills", "create", "--dag-id", "demo", "--from-date", "2024-03-01", "--to-date", "2024-03-15",
		"--max-active-runs", "3", "--wait", "--interval", "50ms", "--timeout", "50s")
	require.NoError(t, worker.Process.Signal(os.Interrupt))
	werr := worker.Wait()
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s\nexecutor: %s", r.stdout, r.stderr, workerLog.String())
	require.Contains(t, r.stdout, "backfill 1 succeeded: 14/14 done (success 14")
	require.NoError(t, werr, "the executor stops cleanly on an interrupt: %s", workerLog.String())
	require.Equal(t, 14, strings.Count(workerLog.String(), "reported run"), workerLog.String())
	require.Contains(t, workerLog.String(), "worker_id=cli-w1")
	require.Contains(t, workerLog.String(), "executor stopped")
}

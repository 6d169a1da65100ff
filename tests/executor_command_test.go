package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExecutorCommand builds backfillctl once and runs `backfillctl executor -- <program>`
// as a subprocess, with real programs (sh), against real services.
func TestExecutorCommand(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	t.Run("EachSlotsDateWrittenOnce", func(t *testing.T) { t.Parallel(); testExecWritesEachDateOnce(t, bin) })
	t.Run("FailingProgramReportsStderrTail", func(t *testing.T) { t.Parallel(); testExecFailure(t, bin) })
	t.Run("TimeoutKillsTheWholeGroup", func(t *testing.T) { t.Parallel(); testExecTimeout(t, bin) })
	t.Run("CancelStopsTheProgram", func(t *testing.T) { t.Parallel(); testExecCancel(t, bin) })
	t.Run("SIGTERMReleasesRuns", func(t *testing.T) { t.Parallel(); testExecSIGTERM(t, bin) })
}

// execLine is one -o json line of the executor.
type execLine struct {
	Event   string `json:"event"`
	ID      int64  `json:"id"`
	RunID   string `json:"run_id"`
	Outcome string `json:"outcome"`
	Note    string `json:"note"`
	PID     int    `json:"pid"`
}

func execLines(t *testing.T, stdout string) []execLine {
	t.Helper()
	var out []execLine
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var l execLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "line %q", sc.Text())
		out = append(out, l)
	}
	return out
}

// runState reads one run's state and note.
func runState(t *testing.T, e *env, id int64) (state string, note *string, attempt int) {
	t.Helper()
	row := struct {
		State   string  `db:"state"`
		Note    *string `db:"note"`
		Attempt int     `db:"attempt"`
	}{}
	require.NoError(t, e.DB.Get(&row, `SELECT state, note, attempt FROM dag_runs WHERE id = $1`, id))
	return row.State, row.Note, row.Attempt
}

// processGone reports whether pid no longer runs (a zombie waiting for its reaper counts as
// gone: it runs nothing).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses: "1234 (sleep) Z ...".
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

func testExecWritesEachDateOnce(t *testing.T, bin string) {
	e := newEnv(t)
	b := e.DailyBackfill("exec_ds", day(1, 1), day(1, 8), "max_active_runs", 4, "code_ref", "git:4f2a9c1")
	out := filepath.Join(t.TempDir(), "dates")
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--concurrency", "3", "--", "sh", "-c",
		`echo "$1 $BACKFILL_DS $BACKFILL_RUN_ID $BACKFILL_ATTEMPT $BACKFILL_CODE_REF $3" >> "$2"`, "sh", "{{ ds }}", out, "{{ code_ref }}")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	sort.Strings(lines)
	var want []string
	for _, d := range days(1, 8) {
		ds := d.Format(time.DateOnly)
		want = append(want, ds+" "+ds+" backfill__"+ts(d)+" 1 git:4f2a9c1 git:4f2a9c1")
	}
	require.Equal(t, want, lines, "each slot's date written exactly once, by its own run")
	require.EqualValues(t, map[string]int64{"success": 8}, runStates(t, e.DB, b.Id))

	events := execLines(t, r.stdout)
	require.Len(t, events, 16, "one line per run start and end")
	for _, l := range events {
		if l.Event == "end" {
			require.Equal(t, "success", l.Outcome)
		}
	}
	checkInvariants(t, e.DB)
}

func testExecFailure(t *testing.T, bin string) {
	e := newEnv(t)
	e.DailyBackfill("exec_fail", day(2, 1), day(2, 2))
	// 5,000 bytes of x, then the lines that matter: the note keeps the last 4 KiB.
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--", "sh", "-c",
		`head -c 5000 /dev/zero | tr '\0' x >&2; echo >&2; echo "cannot load {{ ds }}" >&2; exit 3`)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var ends []execLine
	for _, l := range execLines(t, r.stdout) {
		if l.Event == "end" {
			ends = append(ends, l)
		}
	}
	require.Len(t, ends, 2)
	for _, l := range ends {
		require.Equal(t, "failed", l.Outcome)
		state, note, _ := runState(t, e, l.ID)
		require.Equal(t, "failed", state)
		require.NotNil(t, note)
		require.Len(t, *note, 4096, "the last 4 KiB of stderr")
		ds := strings.TrimPrefix(l.RunID, "backfill__")[:10]
		require.True(t, strings.HasSuffix(*note, "xxx\ncannot load "+ds+"\n"), "note ends %q", (*note)[4000:])
	}
}

func testExecTimeout(t *testing.T, bin string) {
	e := newEnv(t)
	e.DailyBackfill("exec_timeout", day(3, 1), day(3, 1))
	dir := t.TempDir()
	// The shell ignores SIGTERM, and so does its background child (an ignored signal stays
	// ignored across fork and exec): only the group's SIGKILL after --grace ends them.
	script := `trap "" TERM; sleep 1000 & echo $! > "$1"; echo $$ > "$2"; wait; wait`
	started := time.Now()
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--timeout", "1s", "--grace", "300ms",
		"--", "sh", "-c", script, "sh", filepath.Join(dir, "child"), filepath.Join(dir, "shell"))
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Less(t, time.Since(started), 30*time.Second)

	ends := execLines(t, r.stdout)
	require.Len(t, ends, 2)
	require.Equal(t, "failed", ends[1].Outcome)
	require.Equal(t, "timed out after 1s", ends[1].Note)
	state, _, _ := runState(t, e, ends[1].ID)
	require.Equal(t, "failed", state)
	for _, f := range []string{"child", "shell"} {
		pid := readPID(t, filepath.Join(dir, f))
		require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 20*time.Millisecond,
			"%s (pid %d) outlived the timeout", f, pid)
	}
}

// startExecutor starts the executor in the background; the result arrives on the channel.
func startExecutor(t *testing.T, bin string, e *env, args ...string) (*exec.Cmd, <-chan cliResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cliEnv("BACKFILL_SERVER=" + e.URL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan cliResult, 1)
	go func() {
		defer cancel()
		_ = cmd.Wait()
		done <- cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	}()
	return cmd, done
}

func waitFile(t *testing.T, path string, lines int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && strings.Count(string(b), "\n") >= lines
	}, 30*time.Second, 20*time.Millisecond, "waiting for %s", path)
}

func testExecCancel(t *testing.T, bin string) {
	e := newEnv(t)
	b := e.DailyBackfill("exec_cancel", day(4, 1), day(4, 1))
	dir := t.TempDir()
	started, got := filepath.Join(dir, "started"), filepath.Join(dir, "got")
	script := `trap 'echo TERM >> "$2"; exit 143' TERM; echo $$ >> "$1"; sleep 1000 & wait`
	_, done := startExecutor(t, bin, e, "executor", "-o", "json", "--until-idle", "--heartbeat", "100ms",
		"--", "sh", "-c", script, "sh", started, got)
	waitFile(t, started, 1)
	e.ActionOK(b.Id, "cancel")

	r := <-done
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	data, err := os.ReadFile(got)
	require.NoError(t, err)
	require.Equal(t, "TERM\n", string(data), "the program got SIGTERM")
	lines := execLines(t, r.stdout)
	require.Len(t, lines, 2)
	require.Equal(t, "canceled", lines[1].Outcome)
	state, note, _ := runState(t, e, lines[1].ID)
	require.Equal(t, "canceled", state, "a released run of a canceling backfill ends canceled")
	require.Nil(t, note)
	require.True(t, processGone(readPID(t, started)))
	checkInvariants(t, e.DB)
}

func testExecSIGTERM(t *testing.T, bin string) {
	e := newEnv(t)
	b := e.DailyBackfill("exec_sigterm", day(5, 1), day(5, 4))
	started := filepath.Join(t.TempDir(), "started")
	cmd, done := startExecutor(t, bin, e, "executor", "-o", "json", "--concurrency", "2", "--grace", "2s",
		"--", "sh", "-c", `echo $$ >> "$1"; exec sleep 1000`, "sh", started)
	waitFile(t, started, 2)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))

	r := <-done
	require.Equal(t, 0, r.code, "a clean stop; stderr: %s", r.stderr)
	lines := execLines(t, r.stdout)
	require.Len(t, lines, 4)
	for _, l := range lines[2:] {
		require.Equal(t, "released", l.Outcome)
		state, _, attempt := runState(t, e, l.ID)
		require.Equal(t, "queued", state)
		require.Equal(t, 1, attempt, "a clean hand-back costs no attempt")
	}
	require.EqualValues(t, map[string]int64{"queued": 4}, runStates(t, e.DB, b.Id))
	data, err := os.ReadFile(started)
	require.NoError(t, err)
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		require.True(t, processGone(pid), "program %d outlived the executor", pid)
	}
}

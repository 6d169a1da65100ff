package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// escapeScript starts a child in a session of its own (setsid), out of the program's process
// group, that writes its pid to $1 and sleeps; its output goes nowhere, so that it holds no
// pipe of the executor's.
const escapeScript = `setsid sh -c 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 300' sh "$1" >/dev/null 2>&1 </dev/null &
while [ ! -s "$1" ]; do sleep 0.05; done`

// killAtEnd kills the escaped child when the test ends, so that a failure leaks no process.
func killAtEnd(t *testing.T, pidFile string) {
	t.Cleanup(func() {
		if pid := readPIDIfAny(pidFile); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// readPIDIfAny is the pid in path, or 0 when there is none.
func readPIDIfAny(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// A child that left the program's process group with setsid does not outlive the run's
// report: once the program exits, the executor finds it by the run's scope token and stops it
// before it reports.
func TestExecutorStopsASetsidChildBeforeTheReport(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	b := e.DailyBackfill("setsid_end", day(9, 1), day(9, 1))
	pidFile := filepath.Join(t.TempDir(), "escaped")
	killAtEnd(t, pidFile)
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--grace", "500ms",
		"--", "sh", "-c", escapeScript, "sh", pidFile)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.EqualValues(t, map[string]int64{"success": 1}, runStates(t, e.DB, b.Id))
	pid := readPID(t, pidFile)
	require.True(t, processGone(pid), "the setsid child (pid %d) outlived its run's report", pid)
}

// The same child is stopped when --timeout stops the program.
func TestExecutorTimeoutStopsASetsidChild(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	b := e.DailyBackfill("setsid_timeout", day(9, 1), day(9, 1))
	pidFile := filepath.Join(t.TempDir(), "escaped")
	killAtEnd(t, pidFile)
	started := time.Now()
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--timeout", "1s", "--grace", "500ms",
		"--", "sh", "-c", escapeScript+"\nsleep 1000", "sh", pidFile)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Less(t, time.Since(started), 30*time.Second)
	require.EqualValues(t, map[string]int64{"failed": 1}, runStates(t, e.DB, b.Id))
	pid := readPID(t, pidFile)
	require.True(t, processGone(pid), "the setsid child (pid %d) outlived the timeout", pid)
}

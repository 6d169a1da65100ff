package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bigConf is a run conf of about 200 KiB: over Linux's 128 KiB limit on one environment
// string or argument, under the service's 1 MiB limit on dag_run_conf.
func bigConf() map[string]any {
	return map[string]any{"rows": strings.Repeat("r", 200<<10), "tag": "big"}
}

// A conf too big for the environment reaches the program through a private file named by
// BACKFILL_CONF_FILE (BACKFILL_CONF is then absent), and the file is gone after the run.
func TestExecutorBigConfGoesThroughAFile(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	b := e.DailyBackfill("exec_big_conf", day(6, 1), day(6, 1), "dag_run_conf", bigConf())
	dir := t.TempDir()
	copied, path, mode := filepath.Join(dir, "conf"), filepath.Join(dir, "path"), filepath.Join(dir, "mode")
	script := `test -z "${BACKFILL_CONF+set}" || { echo "BACKFILL_CONF is set" >&2; exit 1; }
cp "$BACKFILL_CONF_FILE" "$1" && echo "$BACKFILL_CONF_FILE" > "$2" && stat -c %a "$BACKFILL_CONF_FILE" > "$3"`
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--", "sh", "-c", script, "sh", copied, path, mode)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.EqualValues(t, map[string]int64{"success": 1}, runStates(t, e.DB, b.Id), "stdout: %s\nstderr: %s", r.stdout, r.stderr)

	data, err := os.ReadFile(copied)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(data, &got))
	require.Equal(t, bigConf(), got, "the program read the whole conf")
	m, err := os.ReadFile(mode)
	require.NoError(t, err)
	require.Equal(t, "600", strings.TrimSpace(string(m)), "only the executor's user reads the file")
	p, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = os.Stat(strings.TrimSpace(string(p)))
	require.ErrorIs(t, err, os.ErrNotExist, "the conf file is removed after the run")
}

// {{ conf }} in an argument cannot carry a conf over the limit: the run fails with a note
// that says so and where to read the conf instead, and the program is not started.
func TestExecutorBigConfInAnArgumentFailsTheRunClearly(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	b := e.DailyBackfill("exec_big_conf_arg", day(6, 1), day(6, 1), "dag_run_conf", bigConf())
	started := filepath.Join(t.TempDir(), "started")
	r := runCLI(t, bin, e, "executor", "-o", "json", "--until-idle", "--", "sh", "-c", `touch "$1"`, "sh", started, "{{ conf }}")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.EqualValues(t, map[string]int64{"failed": 1}, runStates(t, e.DB, b.Id))
	lines := execLines(t, r.stdout)
	require.NotEmpty(t, lines)
	end := lines[len(lines)-1]
	require.Equal(t, "failed", end.Outcome)
	_, note, _ := runState(t, e, end.ID)
	require.NotNil(t, note)
	require.Contains(t, *note, "{{ conf }}")
	require.Contains(t, *note, "BACKFILL_CONF_FILE")
	require.NotContains(t, *note, "argument list too long")
	require.NoFileExists(t, started, "the program is not started")
}

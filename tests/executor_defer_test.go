package tests

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A program that exits 75 (EX_TEMPFAIL) has its run deferred for --defer, attempt kept and
// stderr as the note; once the database's clock passes the deferral the executor claims the
// run again, and --until-idle waited for it meanwhile.
func TestExecutorDefersARunWhoseProgramExits75(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	e.DailyBackfill("exec_defer", day(6, 1), day(6, 1))
	marker := filepath.Join(t.TempDir(), "tried")
	script := `if [ -e "$1" ]; then exit 0; fi; echo tried > "$1"; echo "warehouse busy" >&2; exit 75`
	t0 := e.Clock.Now()
	_, done := startExecutor(t, bin, e, "executor", "-o", "json", "--until-idle", "--defer", "90s",
		"--", "sh", "-c", script, "sh", marker)
	waitFile(t, marker, 1)
	var row struct {
		State     string     `db:"state"`
		Attempt   int        `db:"attempt"`
		Note      *string    `db:"note"`
		NotBefore *time.Time `db:"not_before"`
	}
	require.Eventually(t, func() bool {
		require.NoError(t, e.DB.Get(&row, `SELECT state, attempt, note, not_before FROM dag_runs WHERE dag_id = 'exec_defer'`))
		return row.State == "queued"
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, row.Attempt)
	require.Equal(t, "warehouse busy\n", *row.Note)
	requireInstant(t, t0.Add(90*time.Second), row.NotBefore, "not_before")

	e.Clock.Advance(90 * time.Second)
	r := <-done
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var outcomes []string
	for _, l := range execLines(t, r.stdout) {
		if l.Event == "end" {
			outcomes = append(outcomes, l.Outcome)
		}
	}
	require.Equal(t, []string{"deferred", "success"}, outcomes)
	state, _, attempt := runState(t, e, execLines(t, r.stdout)[0].ID)
	require.Equal(t, "success", state)
	require.Equal(t, 1, attempt)
	checkInvariants(t, e.DB)
}

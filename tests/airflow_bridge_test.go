package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/airflowfake"
	"github.com/stretchr/testify/require"
)

// afLine is one -o json line of `backfillctl airflow`.
type afLine struct {
	Event    string `json:"event"`
	ID       int64  `json:"id"`
	RunID    string `json:"run_id"`
	Outcome  string `json:"outcome"`
	Note     string `json:"note"`
	DagRunID string `json:"airflow_dag_run_id"`
	Adopted  bool   `json:"adopted"`
}

func afLines(t *testing.T, stdout string) []afLine {
	t.Helper()
	var out []afLine
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if l == "" {
			continue
		}
		var v afLine
		require.NoError(t, json.Unmarshal([]byte(l), &v), "line %q", l)
		out = append(out, v)
	}
	return out
}

// afRunID is the dag_run_id the bridge documents for a backfill's slot.
func afRunID(dagID string, backfillID int64, logical time.Time) string {
	return fmt.Sprintf("%s/backfillsvc__%d__%s", dagID, backfillID, ts(logical))
}

func decodeNumbers(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "conf %s", raw)
	return m
}

// TestAirflowBridgeRunsEachSlotOnceAcrossSIGTERMAndReportsAirflowsOutcome is the bridge's
// acceptance scenario: four slots run in Airflow; one fails there and its note names the
// failed task; the bridge is stopped with SIGTERM while the other three run in Airflow and
// started again with --until-idle, which follows those three (Airflow's 409 on their ids)
// to success. Each slot is triggered under exactly one dag_run_id, with the run's conf and
// interval; the fake fails the test on any field Airflow's schema forbids.
func TestAirflowBridgeRunsEachSlotOnceAcrossSIGTERMAndReportsAirflowsOutcome(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	f := airflowfake.New(t, "af-token")
	cron := "0 0 * * *"
	f.AddDAG(airflowfake.DAG{DagID: "af_daily", TimetableSummary: &cron, Timezone: "UTC"})
	failing := day(1, 2)
	f.Script(func(_ string, logical time.Time) airflowfake.Outcome {
		if logical.Equal(failing) {
			return airflowfake.Outcome{Polls: 3, FailedTasks: []string{"load"}}
		}
		return airflowfake.Outcome{Hold: true}
	})
	conf := map[string]any{"full_refresh": true, "n": json.Number("9007199254740993")}
	b := e.DailyBackfill("af_daily", day(1, 1), day(1, 4), "max_active_runs", 4, "dag_run_conf", conf)
	slots := days(1, 4)
	bridge := []string{"airflow", "--url", f.URL, "--token", "af-token", "-o", "json", "--poll", "50ms"}

	cmd, done := startExecutor(t, bin, e, append(bridge, "--concurrency", "4")...)
	require.Eventually(t, func() bool {
		running := 0
		for _, r := range f.Runs() {
			if r.State == "running" {
				running++
			}
		}
		return running == 3 && runStates(t, e.DB, b.Id)["failed"] == 1
	}, 30*time.Second, 50*time.Millisecond, "three runs running in Airflow and the failed one reported")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	r := <-done
	require.Equal(t, 0, r.code, "a clean stop; stderr: %s", r.stderr)
	require.EqualValues(t, map[string]int64{"queued": 3, "failed": 1}, runStates(t, e.DB, b.Id),
		"SIGTERM released the runs still running in Airflow")
	for key, run := range f.Runs() {
		require.Empty(t, run.Patches, "SIGTERM leaves Airflow's run %s alone", key)
	}

	f.Release()
	r = runCLI(t, bin, e, append(bridge, "--until-idle", "--concurrency", "2")...)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.EqualValues(t, map[string]int64{"success": 3, "failed": 1}, runStates(t, e.DB, b.Id))
	adopted := 0
	for _, l := range afLines(t, r.stdout) {
		if l.Event == "start" {
			require.True(t, l.Adopted, "the restarted bridge follows %s, never triggers it again", l.DagRunID)
			adopted++
		}
	}
	require.Equal(t, 3, adopted)

	triggers, conflicts, runs := f.Triggers(), f.Conflicts(), f.Runs()
	require.Len(t, triggers, 4, "one dag_run_id per slot: %v", triggers)
	for _, d := range slots {
		key := afRunID("af_daily", b.Id, d)
		require.Equal(t, 1, triggers[key], "%s triggered exactly once", key)
		run := runs[key]
		require.Equal(t, d, run.LogicalDate.UTC())
		require.Equal(t, d, run.DataIntervalStart.UTC())
		require.Equal(t, d.AddDate(0, 0, 1), run.DataIntervalEnd.UTC())
		require.Equal(t, conf, decodeNumbers(t, run.Conf), "the run's conf, digits kept")
		require.Empty(t, run.Patches)
		if d.Equal(failing) {
			require.Equal(t, "failed", run.State)
			require.Zero(t, conflicts[key])
			continue
		}
		require.Equal(t, "success", run.State)
		require.Equal(t, 1, conflicts[key], "the restarted bridge met Airflow's 409 once for %s", key)
	}

	var note string
	require.NoError(t, e.DB.Get(&note, `SELECT note FROM dag_runs WHERE backfill_id = $1 AND state = 'failed'`, b.Id))
	require.Contains(t, note, "backfillsvc__"+fmt.Sprint(b.Id)+"__"+ts(failing), "the note names Airflow's run")
	require.Contains(t, note, "failed tasks: load")
	checkInvariants(t, e.DB)
}

// TestAirflowBridgeCancelFailsAirflowsRun: a cancel of the backfill sets Airflow's run to
// failed (PATCH) and releases the service's run, which ends canceled.
func TestAirflowBridgeCancelFailsAirflowsRun(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	f := airflowfake.New(t, "af-token")
	f.AddDAG(airflowfake.DAG{DagID: "af_cancel", Timezone: "UTC"})
	f.Script(func(string, time.Time) airflowfake.Outcome { return airflowfake.Outcome{Hold: true} })
	b := e.DailyBackfill("af_cancel", day(2, 1), day(2, 1))
	_, done := startExecutor(t, bin, e, "airflow", "--url", f.URL, "--token", "af-token", "-o", "json",
		"--poll", "50ms", "--heartbeat", "100ms", "--until-idle")
	key := afRunID("af_cancel", b.Id, day(2, 1))
	require.Eventually(t, func() bool { return f.Runs()[key].State == "running" }, 30*time.Second, 20*time.Millisecond)
	e.ActionOK(b.Id, "cancel")

	r := <-done
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	run := f.Runs()[key]
	require.Equal(t, []string{"failed"}, run.Patches, "the cancel reached Airflow")
	require.Equal(t, "failed", run.State)
	require.EqualValues(t, map[string]int64{"canceled": 1}, runStates(t, e.DB, b.Id))
	lines := afLines(t, r.stdout)
	require.Equal(t, "canceled", lines[len(lines)-1].Outcome)
}

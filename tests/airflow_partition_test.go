package tests

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/airflowfake"
	"github.com/stretchr/testify/require"
)

// TestAirflowBridgePartitionedPastItsLeaseLeavesAirflowsRunToTheNextClaim: bridge A is cut
// off from the service while its run runs in Airflow; its lease runs out on its own clock
// (client.ErrLeaseExpired), so it stops following without touching Airflow's run and
// without reporting. Bridge B claims the slot once the sweep expires the lease, meets
// Airflow's 409 on the slot's dag_run_id, and follows the same Airflow run to success.
func TestAirflowBridgePartitionedPastItsLeaseLeavesAirflowsRunToTheNextClaim(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	f := airflowfake.New(t, "af-token")
	f.AddDAG(airflowfake.DAG{DagID: "af_part", Timezone: "UTC"})
	f.Script(func(string, time.Time) airflowfake.Outcome { return airflowfake.Outcome{Hold: true} })
	b := e.DailyBackfill("af_part", day(8, 1), day(8, 1))
	followRealTime(t, e)
	proxy := startPartitionProxy(t, strings.TrimPrefix(e.URL, "http://"))
	key := afRunID("af_part", b.Id, day(8, 1))
	args := func(who, server string, extra ...string) []string {
		return append([]string{"--server", server, "airflow", "--url", f.URL, "--token", "af-token", "-o", "json",
			"--worker-id", who, "--dag-id", "af_part", "--lease-seconds", strconv.Itoa(partitionLease),
			"--heartbeat", "2s", "--poll", "50ms"}, extra...)
	}

	cmdA, doneA := startExecutor(t, bin, e, args("A", proxy.URL())...)
	// Cut A off once Airflow runs the run and a heartbeat has moved A's lease.
	var first time.Time
	require.Eventually(t, func() bool {
		var end *time.Time
		if f.Runs()[key].State != "running" {
			return false
		}
		if err := e.DB.QueryRow(`SELECT lease_expires_at FROM dag_runs WHERE backfill_id = $1`, b.Id).Scan(&end); err != nil || end == nil {
			return false
		}
		if first.IsZero() {
			first = *end
		}
		return end.Sub(first) > time.Second
	}, 30*time.Second, 20*time.Millisecond, "A's run never ran in Airflow with a renewed lease")
	proxy.Cut()

	_, doneB := startExecutor(t, bin, e, args("B", e.URL, "--until-idle")...)
	require.Eventually(t, func() bool { return f.Conflicts()[key] == 1 }, 40*time.Second, 20*time.Millisecond,
		"B never claimed the slot again")
	require.Empty(t, f.Runs()[key].Patches, "A's expired lease left Airflow's run alone")
	require.Equal(t, "running", f.Runs()[key].State)
	f.Release()
	rB := <-doneB
	require.Equal(t, 0, rB.code, "stderr: %s", rB.stderr)
	proxy.Heal()
	require.NoError(t, cmdA.Process.Signal(syscall.SIGTERM))
	rA := <-doneA
	require.Equal(t, 0, rA.code, "stderr: %s", rA.stderr)

	linesA := afLines(t, rA.stdout)
	require.Len(t, linesA, 2, "A: %s", rA.stdout)
	require.False(t, linesA[0].Adopted)
	require.Equal(t, "lease_lost", linesA[1].Outcome, "A neither reports the run nor takes it back")
	linesB := afLines(t, rB.stdout)
	require.Len(t, linesB, 2, "B: %s", rB.stdout)
	require.True(t, linesB[0].Adopted, "B follows A's Airflow run")
	require.Equal(t, "success", linesB[1].Outcome)

	require.Equal(t, map[string]int{key: 1}, f.Triggers(), "one Airflow run for the slot")
	require.Equal(t, "success", f.Runs()[key].State)
	require.Empty(t, f.Runs()[key].Patches)
	var worker string
	require.NoError(t, e.DB.QueryRow(`SELECT worker_id FROM dag_runs WHERE backfill_id = $1`, b.Id).Scan(&worker))
	require.Equal(t, "B", worker, "the success is B's")
	require.EqualValues(t, map[string]int64{"success": 1}, runStates(t, e.DB, b.Id))
}

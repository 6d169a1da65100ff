package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/testkit/airflowfake"
	"github.com/stretchr/testify/require"
)

// TestAirflowDagsImportTakesCronDAGsAndSkipsOthers: `dags import` pages through Airflow's
// DAGs (past the first page of 100), creates or updates the service's DAG of each cron or
// preset timetable with its timezone and max_active_runs, and reports and skips a DAG
// scheduled on assets or with no schedule. A user's password buys its token. An update keeps
// the service's own dependencies of the DAG, which Airflow does not know.
func TestAirflowDagsImportTakesCronDAGsAndSkipsOthers(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	f := airflowfake.New(t, "")
	f.AddUser("importer", "pw", time.Hour)
	str := func(s string) *string { return &s }
	f.AddDAG(airflowfake.DAG{DagID: "af_cron", TimetableSummary: str("0 2 * * *"), Timezone: "America/New_York", MaxActiveRuns: 3})
	f.AddDAG(airflowfake.DAG{DagID: "af_preset", TimetableSummary: str("@daily"), Timezone: "UTC"})
	f.AddDAG(airflowfake.DAG{DagID: "af_asset", TimetableSummary: str("Asset"), Timezone: "UTC"})
	f.AddDAG(airflowfake.DAG{DagID: "af_none", Timezone: "UTC"})
	for i := range 100 {
		f.AddDAG(airflowfake.DAG{DagID: fmt.Sprintf("af_once_%03d", i), TimetableSummary: str("@once"), Timezone: "UTC"})
	}
	f.AddDAG(airflowfake.DAG{DagID: "af_second_page", TimetableSummary: str("30 * * * *"), Timezone: "Europe/Amsterdam", MaxActiveRuns: 2})
	e.PutDag("af_upstream", "@hourly", "")
	e.PutDagWith("af_cron", "@hourly", "depends_on_past", true,
		"upstreams", []any{map[string]any{"dag_id": "af_upstream", "mapping": "all", "lookback": 2}})

	r := runCLI(t, bin, e, "dags", "import", "--airflow", f.URL, "--airflow-user", "importer", "--airflow-password", "pw", "-o", "json")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	actions := map[string]map[string]any{}
	for _, l := range importLines(t, r.stdout) {
		actions[l["dag_id"].(string)] = l
	}
	require.Len(t, actions, 105, "one line per DAG Airflow lists, over two pages")
	require.Equal(t, "updated", actions["af_cron"]["action"])
	require.Equal(t, "created", actions["af_preset"]["action"])
	require.Equal(t, "created", actions["af_second_page"]["action"])
	require.Equal(t, "skipped", actions["af_asset"]["action"])
	require.Contains(t, actions["af_asset"]["reason"], `timetable "Asset" is not a 5-field cron expression`)
	require.Equal(t, "skipped", actions["af_none"]["action"])
	require.Equal(t, "skipped", actions["af_once_042"]["action"])

	for _, want := range []struct {
		id, schedule, tz string
		maxActive        int32
	}{
		{"af_cron", "0 2 * * *", "America/New_York", 3},
		{"af_preset", "@daily", "UTC", 16},
		{"af_second_page", "30 * * * *", "Europe/Amsterdam", 2},
	} {
		d := call[api.Dag](e, http.StatusOK, http.MethodGet, "/api/v1/dags/"+want.id, nil)
		require.Equal(t, want.schedule, d.Schedule, want.id)
		require.Equal(t, want.tz, d.Timezone, want.id)
		require.Equal(t, want.maxActive, d.MaxActiveRuns, want.id)
	}
	kept := call[api.Dag](e, http.StatusOK, http.MethodGet, "/api/v1/dags/af_cron", nil)
	require.Equal(t, []api.DagUpstream{{DagId: "af_upstream", Mapping: api.DependencyMappingAll, Lookback: 2}}, kept.Upstreams)
	require.True(t, kept.DependsOnPast)
	for _, id := range []string{"af_asset", "af_none", "af_once_000"} {
		require.Equal(t, http.StatusNotFound, e.Do(http.MethodGet, "/api/v1/dags/"+id, nil).Status, "%s was not imported", id)
	}

	r = runCLI(t, bin, e, "dags", "import", "--airflow", f.URL, "--airflow-user", "importer", "--airflow-password", "pw",
		"--dag-id", "af_preset", "--dag-id", "af_missing")
	require.Equal(t, 3, r.code, "a DAG Airflow does not have is an error; stdout: %s", r.stdout)
	require.Contains(t, r.stdout, "updated  af_preset")
	require.Contains(t, r.stdout, "error    af_missing  no such DAG in Airflow")
}

// importLines reads the -o json lines of `dags import`.
func importLines(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "line %q", l)
		out = append(out, m)
	}
	return out
}

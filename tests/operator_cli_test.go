package tests

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// testCLIOperator drives the operator commands of backfillctl against a real service: a
// dry run's plan hash bound to the create, a failure budget shown as the pause reason,
// patch, notes in the slot listing, retry, and DAG delete.
func testCLIOperator(t *testing.T, bin string) {
	e := newEnv(t)
	okCLI(t, bin, e, "dags", "put", "cli_op", "--schedule", "@daily")
	window := []string{"--dag-id", "cli_op", "--from-date", "2024-01-01", "--to-date", "2024-01-03"}
	out := okCLI(t, bin, e, append([]string{"backfills", "dry-run"}, window...)...)
	m := regexp.MustCompile(`plan hash ([0-9a-f]{64})`).FindStringSubmatch(out)
	require.NotNil(t, m, out)

	r := runCLI(t, bin, e, append([]string{"backfills", "create", "--if-match", "0000"}, window...)...)
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "plan_changed (412)")

	out = okCLI(t, bin, e, append([]string{"backfills", "create", "--if-match", m[1], "--max-failed-runs", "1", "--max-active-runs", "3"}, window...)...)
	require.Regexp(t, `(?m)^PLAN HASH:\s+`+m[1]+`$`, out)
	require.Regexp(t, `(?m)^MAX FAILED RUNS:\s+1$`, out)
	id := cliIDLine.FindStringSubmatch(out)[1]

	runs := e.ClaimDag("w", "cli_op", 3)
	require.Len(t, runs, 3)
	e.ReportFailed(runs[0], "disk\nfull")
	require.Regexp(t, `(?m)^STATE:\s+paused \(failure_budget\)$`, okCLI(t, bin, e, "backfills", "get", id))
	require.Regexp(t, `(?m)\s+failed\s+1\s+-\s+disk full$`, okCLI(t, bin, e, "backfills", "runs", id))

	out = okCLI(t, bin, e, "backfills", "patch", id, "--max-failed-runs", "none", "--max-active-runs", "5")
	require.Regexp(t, `(?m)^MAX FAILED RUNS:\s+none$`, out)
	require.Regexp(t, `(?m)^MAX ACTIVE RUNS:\s+5$`, out)
	r = runCLI(t, bin, e, "backfills", "patch", id)
	require.Equal(t, 3, r.code, "a patch without changes is a usage error")

	okCLI(t, bin, e, "backfills", "unpause", id)
	e.Report(runs[1], "success")
	e.Report(runs[2], "canceled")
	e.SweepOnce()
	out = okCLI(t, bin, e, "backfills", "retry", id, "--max-active-runs", "1", "--idempotency-key", "cli-retry")
	require.Regexp(t, `(?m)^RETRY OF:\s+`+id+`$`, out)
	require.Regexp(t, `(?m)^PROGRESS:\s+0/2 done`, out)
	require.Regexp(t, `(?m)^MAX ACTIVE RUNS:\s+1$`, out)

	r = runCLI(t, bin, e, "dags", "delete", "cli_op")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "backfill_already_running (409)")
	okCLI(t, bin, e, "backfills", "cancel", cliIDLine.FindStringSubmatch(out)[1])
	require.Contains(t, okCLI(t, bin, e, "dags", "delete", "cli_op"), "DAG cli_op deleted")
}

package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// --logical-date and --logical-dates-file choose the slots; --code-ref, --reason and --actor
// are recorded, and get and list show them.
func testCLIChosenDates(t *testing.T, bin string) {
	e := newEnv(t)
	okCLI(t, bin, e, "dags", "put", "cli_chosen", "--schedule", "@daily")
	file := filepath.Join(t.TempDir(), "dates")
	require.NoError(t, os.WriteFile(file, []byte("# the broken days\n2024-01-04\n\n2024-01-02T00:00:00Z\n"), 0o600))
	window := []string{"--dag-id", "cli_chosen", "--from-date", "2024-01-01", "--to-date", "2024-01-31"}

	out := okCLI(t, bin, e, append([]string{"backfills", "dry-run", "--logical-date", "2024-01-09", "--logical-dates-file", file}, window...)...)
	require.Contains(t, out, "3 slots: 3 create, 0 reprocess, 0 skip")
	require.Contains(t, out, "estimate: none (no_successful_runs)")

	r := runCLI(t, bin, e, append([]string{"backfills", "create", "--logical-date", "2024-01-09T06:00:00Z"}, window...)...)
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "invalid_logical_dates")

	var b client.Backfill
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, append([]string{"-o", "json", "backfills", "create",
		"--logical-date", "2024-01-09", "--logical-dates-file", file, "--code-ref", "git:abc", "--reason", "DATA-9",
		"--actor", "carol"}, window...)...)), &b))
	require.EqualValues(t, 3, b.Progress.Total)
	require.Equal(t, "carol", *b.CreatedBy)
	out = okCLI(t, bin, e, "backfills", "get", strconv.FormatInt(b.Id, 10))
	require.Regexp(t, `(?m)^CODE REF:\s+git:abc$`, out)
	require.Regexp(t, `(?m)^CREATED BY:\s+carol$`, out)
	require.Regexp(t, `(?m)^REASON:\s+DATA-9$`, out)
	require.Regexp(t, `(?m)\scarol\s+DATA-9$`, okCLI(t, bin, e, "backfills", "list"))
}

package tests

import (
	"encoding/json"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// backfillctl pools put|get|list|delete, and backfills create --pool, as a user types them.
func TestPoolsCLI(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	e.PutDag("cli_pool", "@daily", "UTC")

	var p api.Pool
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "pools", "put", "etl", "--slots", "2",
		"--description", "warehouse", "-o", "json")), &p))
	require.EqualValues(t, 2, p.Slots)
	require.Equal(t, "warehouse", *p.Description)

	okCLI(t, bin, e, "backfills", "create", "--dag-id", "cli_pool", "--from-date", "2024-01-01",
		"--to-date", "2024-01-03", "--pool", "etl")
	table := okCLI(t, bin, e, "pools", "list")
	require.Regexp(t, `(?m)^NAME\s+SLOTS\s+RUNNING\s+QUEUED\s+DESCRIPTION$`, table)
	require.Regexp(t, `(?m)^etl\s+2\s+0\s+3\s+warehouse$`, table)
	require.Regexp(t, `(?m)^etl\s+2\s+0\s+3`, okCLI(t, bin, e, "pools", "get", "etl"))

	r := runCLI(t, bin, e, "pools", "delete", "etl")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "pool_in_use")
	r = runCLI(t, bin, e, "pools", "put", "etl")
	require.Equal(t, 3, r.code, "--slots is required")

	okCLI(t, bin, e, "pools", "put", "spare", "--slots", "1")
	require.Contains(t, okCLI(t, bin, e, "pools", "delete", "spare"), "pool spare deleted")
	r = runCLI(t, bin, e, "pools", "get", "spare")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "pool_not_found")
}

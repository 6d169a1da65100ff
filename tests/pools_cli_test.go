package tests

import (
	"encoding/json"
	"testing"
	"time"

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
	require.Regexp(t, `(?m)^NAME\s+SLOTS\s+RUNNING\s+QUEUED\s+RATE\s+NEXT START\s+DESCRIPTION$`, table)
	require.Regexp(t, `(?m)^etl\s+2\s+0\s+3\s+-\s+-\s+warehouse$`, table)
	require.Regexp(t, `(?m)^etl\s+2\s+0\s+3`, okCLI(t, bin, e, "pools", "get", "etl"))

	r := runCLI(t, bin, e, "pools", "delete", "etl")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "pool_in_use")
	r = runCLI(t, bin, e, "pools", "put", "etl")
	require.Equal(t, 3, r.code, "--slots is required")

	// A pace: --rate N/PER, shown by get with the next start once it is used up.
	okCLI(t, bin, e, "pools", "put", "etl", "--slots", "2", "--rate", "1/hour")
	e.Claim("w", 5)
	got := okCLI(t, bin, e, "pools", "get", "etl")
	require.Regexp(t, `(?m)^etl\s+2\s+1\s+2\s+1/hour\s+`+e.Clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`\s`, got)
	for _, bad := range []string{"5", "5/day", "x/minute", "0/minute"} {
		r = runCLI(t, bin, e, "pools", "put", "etl", "--slots", "2", "--rate", bad)
		require.Equal(t, 3, r.code, "--rate %s: %s", bad, r.stderr)
	}

	okCLI(t, bin, e, "pools", "put", "spare", "--slots", "1")
	require.Contains(t, okCLI(t, bin, e, "pools", "delete", "spare"), "pool spare deleted")
	r = runCLI(t, bin, e, "pools", "get", "spare")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "pool_not_found")
}

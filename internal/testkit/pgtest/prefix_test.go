package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDBPrefixDefaultsAndRefusesUnsafeNames(t *testing.T) {
	p, err := dbPrefix("")
	require.NoError(t, err)
	assert.Equal(t, "bf_t_", p)
	p, err = dbPrefix("ci_job7_")
	require.NoError(t, err)
	assert.Equal(t, "ci_job7_", p)
	for _, bad := range []string{"bf_t", "BF_T_", "bf-t_", `x"; DROP_`, "1bf_", strings.Repeat("a", 30) + "_"} {
		_, err := dbPrefix(bad)
		assert.Error(t, err, bad)
	}
}

// This process's databases, the template included, carry the prefix: the sweep that drops
// by it covers everything the harness makes.
func TestEveryHarnessDatabaseCarriesThePrefix(t *testing.T) {
	st := current.Load()
	base, err := dbPrefix(os.Getenv(EnvPrefix))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(st.template, base), st.template)
	assert.True(t, strings.HasPrefix(st.prefix, base), st.prefix)
}

// The stale sweep drops an unused, stale database only when its name has the prefix: one
// labelled exactly like a harness database but named otherwise is left alone.
func TestStaleSweepDropsOnlyDatabasesWithThePrefix(t *testing.T) {
	st := current.Load()
	ctx := context.Background()
	token := randomToken()
	prefix := "bf_sweep" + token + "_"
	mine, other := prefix+"1", "bf_other"+token+"_1"
	old := time.Now().Add(-2 * staleAfter).UTC().Format(time.RFC3339)
	for _, name := range []string{mine, other} {
		require.NoError(t, st.createDatabase(ctx, name, "template0"))
		_, err := st.admin.ExecContext(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS %s",
			pq.QuoteIdentifier(name), pq.QuoteLiteral("pgtest host=elsewhere pid=1 created="+old)))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, name := range []string{mine, other} {
			_, _ = st.admin.Exec("DROP DATABASE IF EXISTS " + pq.QuoteIdentifier(name))
		}
	})

	sweepStale(ctx, st.admin, prefix, "here")
	exists := func(name string) bool {
		var ok bool
		require.NoError(t, st.admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok))
		return ok
	}
	assert.False(t, exists(mine), "a stale database with the prefix is dropped")
	assert.True(t, exists(other), "a database without the prefix is never dropped")
}

package repo

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// proxiedStorePool is a pool whose sessions open through pgrun.Connector and a
// fault-injecting proxy, with a direct handle on the same database.
func proxiedStorePool(t *testing.T) (through *sqlx.DB, direct *sqlx.DB, p *pgproxy.Proxy) {
	t.Helper()
	direct, dsn := pgtest.Open(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p = pgproxy.Start(t, u.Host)
	pc, err := pq.NewConnector(p.DSN(t, dsn))
	require.NoError(t, err)
	through = sqlx.NewDb(sql.OpenDB(pgrun.Connector(pc, time.Second)), "postgres")
	t.Cleanup(func() { _ = through.Close() })
	require.NoError(t, through.Ping())
	return through, direct, p
}

// A read of the API caught by a failover rides it: its session dies on more attempts in a row
// than database/sql makes by itself (three, two on pooled sessions and one on a new one),
// and the read still answers, from a session opened after them.
func TestReadOfTheAPIRidesSessionsLostInARow(t *testing.T) {
	t.Parallel()
	through, direct, p := proxiedStorePool(t)
	ctx := context.Background()
	_, _, err := New(direct, Config{}).DagPut(ctx, DagPutParams{
		DagID: "ride", Schedule: "@daily", Timezone: "UTC", MaxActiveRuns: 1})
	require.NoError(t, err)
	s := New(through, Config{ReconnectWait: 5 * time.Second})
	const lost = 5
	p.SetRule(pgproxy.Times(lost, pgproxy.OnSQL("FROM dags WHERE dag_id", func(ev pgproxy.Event) pgproxy.Action {
		if ev.Dir == pgproxy.FromServer && ev.Type == 'D' { // DataRow
			return pgproxy.Reset
		}
		return pgproxy.Forward
	})))
	dag, err := s.DagGet(ctx, "ride")
	require.NoError(t, err)
	require.Equal(t, "ride", dag.DagID)
	require.Equal(t, lost, p.Fired(), "every one of the lost sessions was met")
}

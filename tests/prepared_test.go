package tests

import (
	"context"
	"testing"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// TestHotStatementsArePreparedOnlyWithoutAPooler: with PrepareStatements (DB_POOLER=none) the
// status read, the claim, the report, the heartbeat and the reads of events are prepared on
// the connection that ran them, so PostgreSQL plans them once per connection; without it
// (DB_POOLER=transaction) nothing is left prepared on a session, which is what PgBouncer in
// transaction mode needs (TestAPIThroughPgBouncerTransactionMode runs the service that way).
// Each pool has one connection, so pg_prepared_statements read on the pool is the session
// that ran them.
func TestHotStatementsArePreparedOnlyWithoutAPooler(t *testing.T) {
	_, dsn := openServicePool(t)
	for _, prepare := range []bool{true, false} {
		onePool := func() *sqlx.DB {
			db := openStoreDB(t, dsn)
			db.SetMaxOpenConns(1)
			return db
		}
		db, leaseDB := onePool(), onePool()
		store := repo.New(db, repo.Config{LeaseDB: leaseDB, PrepareStatements: prepare})
		ctx := context.Background()

		_, err := store.BackfillGet(ctx, 1)
		require.ErrorIs(t, err, repo.ErrBackfillNotFound)
		_, _, err = store.RunClaim(ctx, repo.RunClaimParams{WorkerID: "w", Limit: 1, LeaseSeconds: 60})
		require.NoError(t, err)
		_, err = store.RunHeartbeat(ctx, 1, "w")
		require.ErrorIs(t, err, repo.ErrRunNotFound)
		_, err = store.RunReport(ctx, repo.RunReportParams{DagID: "d", RunID: "r", State: domain.RunSuccess})
		require.ErrorIs(t, err, repo.ErrDagNotFound)
		dag := "nosuchdag"
		_, err = store.EventScan(ctx, repo.EventScanParams{Limit: 10, DagID: &dag})
		require.NoError(t, err)
		_, _, err = store.EventPage(ctx, repo.EventListParams{Limit: 10})
		require.NoError(t, err)

		prepared := func(db *sqlx.DB) []string {
			var stmts []string
			require.NoError(t, db.SelectContext(ctx, &stmts,
				`SELECT statement FROM pg_prepared_statements WHERE NOT from_sql ORDER BY prepare_time`))
			return stmts
		}
		main, lease := prepared(db), prepared(leaseDB)
		if !prepare {
			require.Empty(t, main, "DB_POOLER=transaction: nothing may stay prepared on the session")
			require.Empty(t, lease, "DB_POOLER=transaction: nothing may stay prepared on the session")
			continue
		}
		// The claim found nothing, so it also asked whether an owner was passed over.
		require.Len(t, main, 5, "the status read, the claim and its claimable check, a page of events and the hub's read: %q", main)
		require.Contains(t, main[0], "FROM backfills WHERE id = $1")
		require.Contains(t, main[1], "WITH RECURSIVE dag_owner")
		require.Contains(t, main[2], "SELECT EXISTS (SELECT 1 FROM backfills WHERE")
		require.Contains(t, main[3], "FROM events_scan(")
		require.Contains(t, main[4], "events WHERE id > $1")
		require.Len(t, lease, 2, "the heartbeat and the report: %q", lease)
		require.Contains(t, lease[0], "WITH hb AS")
		require.Contains(t, lease[1], "WITH cur AS MATERIALIZED")

		// A second status read reuses the statement: nothing more is prepared.
		_, err = store.BackfillGet(ctx, 2)
		require.ErrorIs(t, err, repo.ErrBackfillNotFound)
		require.Len(t, prepared(db), 5)
	}
}

package repo

import (
	"context"
	"testing"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/stretchr/testify/require"
)

// A database whose events were written by transaction ids this cluster has not reached (a
// logical restore into a new cluster) is refused, with the epoch that makes it safe; one
// whose events are behind the cluster's transaction ids, or has none, is not.
func TestCheckEventIDsAheadRefusesEventsFromAheadOfTheCluster(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	ctx := context.Background()
	require.NoError(t, CheckEventIDsAhead(ctx, db), "no events")

	_, err := db.Exec(`INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		VALUES ('backfill.updated', 1, 'd', now(), '{}')`)
	require.NoError(t, err)
	require.NoError(t, CheckEventIDsAhead(ctx, db), "an event of this cluster")

	// As an event restored from a cluster of epoch 3 would be, in the partition it came with.
	_, err = db.Exec(`CREATE TABLE outbox_restored PARTITION OF outbox
		FOR VALUES FROM (((3::bigint << 32) + 1) << 12) TO (((3::bigint << 32) + 1000) << 12)`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, data)
		VALUES (((3::bigint << 32) + 77) << 12, 'backfill.updated', 1, 'd', now(), '{}')`)
	require.NoError(t, err)
	err = CheckEventIDsAhead(ctx, db)
	require.ErrorContains(t, err, "event ids of transaction 12884901965")
	require.ErrorContains(t, err, "pg_resetwal -e 4")

	// With no event left (all pruned), a backfill's bound from that cluster is refused too:
	// the backfill's new events would sort before where its reads start.
	_, err = db.Exec(`DELETE FROM events`)
	require.NoError(t, err)
	require.NoError(t, CheckEventIDsAhead(ctx, db), "no events")
	_, err = db.Exec(`
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('d', '@daily', 'UTC', 16, false, now(), now());
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at, events_from)
		VALUES ('d', '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now(), ((3::bigint << 32) + 90) << 12);
		DELETE FROM events`)
	require.NoError(t, err)
	err = CheckEventIDsAhead(ctx, db)
	require.ErrorContains(t, err, "event ids of transaction 12884901978")
	require.ErrorContains(t, err, "pg_resetwal -e 4")

	// With no backfill either, the outbox's partitions made by that cluster are refused: new
	// events would find none that takes their ids.
	_, err = db.Exec(`DELETE FROM backfills;
		INSERT INTO outbox_partitions (name, lo, hi, created_at, created_xid)
		VALUES ('outbox_restored', ((3::bigint << 32) + 1) << 12, ((3::bigint << 32) + 1000) << 12, now(), (3::bigint << 32) + 95)`)
	require.NoError(t, err)
	err = CheckEventIDsAhead(ctx, db)
	require.ErrorContains(t, err, "event ids of transaction 12884901982")
}

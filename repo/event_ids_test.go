package repo

import (
	"context"
	"testing"

	"github.com/backfillsvc/backfill/internal/pgtest"
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

	// As an event restored from a cluster of epoch 3 would be.
	_, err = db.Exec(`INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, data)
		VALUES (((3::bigint << 32) + 77) << 12, 'backfill.updated', 1, 'd', now(), '{}')`)
	require.NoError(t, err)
	err = CheckEventIDsAhead(ctx, db)
	require.ErrorContains(t, err, "the newest event was written by transaction 12884901965")
	require.ErrorContains(t, err, "pg_resetwal -e 4")
}

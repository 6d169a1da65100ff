package repo

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// CheckEventIDsAhead refuses a database whose outbox holds events written by a transaction
// id this cluster has not reached yet, or whose backfills' events_from (the id their events'
// reads start from, migrations/00022) is past it, or whose outbox partitions were made past it
// (migrations/00037: new events would find no partition). An event's id is its writer's transaction
// id shifted left 12 bits (migrations/00014_events_without_lock.sql), so on such a cluster
// every new event would sort before the old ones: the feed's readers, who ask after the last
// id they saw, and the webhook fan-out, which follows transaction ids, would never see it,
// and a backfill's reads would start after its new events. It happens after a logical
// restore (pg_dump) into another cluster, whose transaction ids start over; a physical
// restore or pg_upgrade keeps them. The remedy is a larger transaction id epoch for the new
// cluster, which PostgreSQL itself does not use (pg_resetwal -e, as PgQ's documentation asks
// of such restores; docs/OPERATIONS.md).
func CheckEventIDsAhead(ctx context.Context, db sqlx.QueryerContext) error {
	var ids struct {
		Newest int64 `db:"newest"` // the newest event's writer's transaction id, or a backfill's bound's
		Next   int64 `db:"next"`   // the cluster's next transaction id
	}
	err := sqlx.GetContext(ctx, db, &ids, `
		SELECT greatest(coalesce((SELECT max(id) FROM events), 0),
				coalesce((SELECT max(events_from) FROM backfills), 0),
				coalesce((SELECT max(created_xid - 1) << 12 FROM outbox_partitions), 0)) >> 12 AS newest,
			pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next`)
	if err != nil {
		return fmt.Errorf("check event ids: %w", err)
	}
	if ids.Newest < ids.Next {
		return nil
	}
	return fmt.Errorf("the outbox holds event ids of transaction %d (the newest event's, or a backfill's events_from), at or past this cluster's next transaction id %d: "+
		"event ids come from transaction ids, so events written now would sort before it and readers that follow the ids "+
		"would never see them (a logical restore into another cluster does this); stop PostgreSQL, run "+
		"`pg_resetwal -e %d` on its data directory, start it again (docs/OPERATIONS.md, \"Backups, restores and upgrades\")",
		ids.Newest, ids.Next, ids.Newest>>32+1)
}

package pgtest

import (
	"testing"

	"github.com/jmoiron/sqlx"
)

// CutEventPartition ends the outbox partition that takes the next events (migrations/00037)
// at the next transaction id: the events written so far keep their partition, which closes
// as soon as the transactions that could still write into it end, and a new one takes the rest
// of its range. The sweep's partitions do this over hours; retention tests need it at once.
func CutEventPartition(t testing.TB, db *sqlx.DB) {
	t.Helper()
	db.MustExec(`DO $$
	DECLARE
		cut constant bigint := (pg_current_xact_id()::text::bigint + 1) << 12;
		p outbox_partitions;
	BEGIN
		SELECT * INTO STRICT p FROM outbox_partitions WHERE lo < cut AND hi > cut;
		EXECUTE format('ALTER TABLE outbox DETACH PARTITION %I', p.name);
		EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', p.name,
			CASE WHEN p.name = 'events_legacy' THEN 'MINVALUE' ELSE p.lo::text END, cut);
		EXECUTE format('CREATE TABLE %I PARTITION OF outbox FOR VALUES FROM (%s) TO (%s)', 'outbox_p' || cut, cut, p.hi);
		UPDATE outbox_partitions SET hi = cut WHERE name = p.name;
		INSERT INTO outbox_partitions (name, lo, hi, created_at, created_xid)
		VALUES ('outbox_p' || cut, cut, p.hi, clock_timestamp(), cut >> 12);
	END $$`)
}

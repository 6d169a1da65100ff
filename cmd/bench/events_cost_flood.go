package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// P12 (b)'s flood: 10 million events of other backfills in a partition of their own, written
// by bulk INSERT rather than through the service (a PATCH a time would take hours). (b) reads
// past it and (c) drops it, so it is neither's alone.

// cutEventPartitionSQL is internal/testkit/pgtest's CutEventPartition (the bench imports no
// test kit): it ends the outbox partition that takes the next events at the next transaction
// id, and a new partition takes the rest of its range.
const cutEventPartitionSQL = `DO $$
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
	END $$`

// floodSQL writes events $2..$3-1 of the flood: thin backfill.updated rows, as the PATCH
// writes them, of $4 backfills that do not exist, interleaved as a busy outbox's are (each
// 16-page range of the bloom index holds every one of them), with ids of transaction $1 on.
const floodSQL = `
	INSERT INTO outbox (id, kind, backfill_id, occurred_at, state, max_active_runs, priority,
		num_queued, num_running, num_success, num_failed, num_canceled, num_skipped, num_blocked)
	SELECT ($1::bigint << 12) + g, event_kind('backfill.updated'), 1000000000 + g % $4, now(), 'running', 10, 0,
		200, 10, 700, 3, 0, 0, 0
	FROM generate_series($2::bigint, $3::bigint - 1) g`

// fillOutbox writes n events of other backfills whose ids lie after every event so far and
// before every one written later, in a partition of their own, as tests/events_bounded_test.go
// fills it: the ids of transactions that it first runs and ends empty (a transaction writes
// 4,096 events at most), so that they are below the horizon of every reader. The current
// partition is cut before those transactions and after them. Answers the flood's partition.
func (b *bench) fillOutbox(ctx context.Context, db *sqlx.DB, n, backfills int) (string, error) {
	if _, err := db.ExecContext(ctx, cutEventPartitionSQL); err != nil {
		return "", fmt.Errorf("cut before the flood: %w", err)
	}
	conn, err := db.Connx(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var first, xid int64
	if err := conn.GetContext(ctx, &first, `SELECT pg_current_xact_id()::text::bigint`); err != nil {
		return "", err
	}
	// Other databases take transaction ids too: run until the flood's last one has gone by.
	for last := first + int64(n-1)>>12; xid <= last; {
		if err := conn.GetContext(ctx, &xid, `SELECT pg_current_xact_id()::text::bigint`); err != nil {
			return "", err
		}
	}
	if _, err := db.ExecContext(ctx, cutEventPartitionSQL); err != nil {
		return "", fmt.Errorf("cut after the flood's ids: %w", err)
	}
	start := time.Now()
	const chunk = 1_000_000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			return "", err
		}
		// A bulk load: its commit need not wait for the disk.
		_, err = tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`)
		if err == nil {
			_, err = tx.ExecContext(ctx, floodSQL, first, lo, hi, backfills)
		}
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			_ = tx.Rollback()
			return "", fmt.Errorf("flood rows %d-%d: %w", lo, hi, err)
		}
		if n > chunk {
			b.log.Printf("P12 flood: %d of %d events written (%v)", hi, n, time.Since(start).Round(time.Second))
		}
	}
	var name string
	err = conn.GetContext(ctx, &name, `SELECT name FROM outbox_partitions WHERE lo <= $1 AND hi > $2`,
		first<<12, first<<12+int64(n)-1)
	b.log.Printf("P12 flood of %d events of %d backfills in partition %s, written in %v", n, backfills, name,
		time.Since(start).Round(100*time.Millisecond))
	return name, err
}

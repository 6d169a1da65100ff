package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/backfillsvc/backfill/repo"
)

// P12 (c): retention, the sweep's drop of the flood's partition.

// partitionDrop is (c): the flood's partition, closed by the sweep in (b), is made expired by
// setting its close 8 days back (the service's clock is not moved: the other partitions stay
// within retention), and the sweep pass with a retention of 7 days is timed. Its table must be
// gone and the outbox smaller by the flood, the events of A and B still there.
func (b *bench) partitionDrop(ctx context.Context, s *repo.Store, db *sqlx.DB, res *eventsCostResult, flood string) error {
	var before, inFlood int64
	if err := db.GetContext(ctx, &before, `SELECT count(*) FROM outbox`); err != nil {
		return err
	}
	if err := db.GetContext(ctx, &inFlood, `SELECT count(*) FROM `+pq.QuoteIdentifier(flood)); err != nil {
		return err
	}
	if inFlood != int64(res.sizes.flood) {
		return fmt.Errorf("partition %s holds %d events, want the flood's %d", flood, inFlood, res.sizes.flood)
	}
	r, err := db.ExecContext(ctx, `UPDATE outbox_partitions SET closed_at = backfill_now() - interval '8 days'
		WHERE name = $1 AND closed_at IS NOT NULL`, flood)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return fmt.Errorf("the sweep did not close partition %s", flood)
	}
	b.awaitAutovacuum(ctx)
	start := time.Now()
	pass, err := s.SweepEventPartitions(ctx, repo.EventPartitionParams{Retention: 7 * 24 * time.Hour})
	res.drop = time.Since(start)
	if err != nil {
		return err
	}
	var gone bool
	var after int64
	if err := db.GetContext(ctx, &gone, `SELECT to_regclass($1) IS NULL AND NOT EXISTS (SELECT 1 FROM outbox_partitions WHERE name = $1)`, flood); err != nil {
		return err
	}
	if err := db.GetContext(ctx, &after, `SELECT count(*) FROM outbox`); err != nil {
		return err
	}
	res.dropped = before - after
	if pass.Dropped != 1 || !gone || res.dropped != inFlood {
		return fmt.Errorf("the pass dropped %d partitions (want 1), %s gone: %v, the outbox lost %d events (want %d)",
			pass.Dropped, flood, gone, res.dropped, inFlood)
	}
	var left int64
	if err := db.GetContext(ctx, &left, `SELECT count(*) FROM outbox o JOIN backfills b ON b.id = o.backfill_id
		WHERE b.dag_id IN ('p12_before', 'p12_after')`); err != nil {
		return err
	}
	if left != 2*int64(len(p12Types)) {
		return fmt.Errorf("after the drop backfills A and B have %d events, want %d", left, 2*len(p12Types))
	}
	b.log.Printf("P12 the sweep pass dropped %s (%d events) in %v", flood, res.dropped, res.drop.Round(time.Millisecond))
	return nil
}

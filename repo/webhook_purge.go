package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// WebhookPurgeDeleted removes up to batch rows of the delivery log of deleted webhooks: their
// attempts first, then, once none is left, their deliveries. Each call is one short
// statement; several replicas may purge at once (rows another purge holds are skipped). It
// answers how many rows it removed: 0 when nothing is left to purge.
//
// Deleted webhooks are kept as marked rows (a few bytes each): a delivery made by an event
// transaction that read the webhook just before its deletion committed is found here later
// and removed like the rest.
func (s *Store) WebhookPurgeDeleted(ctx context.Context, batch int) (int, error) {
	ids, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (ids []int64, err error) {
		err = sqlx.SelectContext(ctx, q, &ids, `
			SELECT w.id FROM webhooks w
			WHERE w.deleted_at IS NOT NULL
			  AND EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.id)
			ORDER BY w.id LIMIT 16`)
		return ids, err
	})
	if err != nil {
		return 0, fmt.Errorf("find deleted webhooks to purge: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	for _, id := range ids {
		n, err := s.purgeOne(ctx, id, batch)
		if err != nil || n > 0 {
			return n, err
		}
	}
	return 0, nil
}

// purgeOne removes up to batch rows of one deleted webhook's log, attempts before deliveries
// so that no single statement cascades through an unbounded number of attempts.
//
// Each batch takes the first rows in index order (ORDER BY the index's next column), so that
// PostgreSQL walks the webhook's index entries and stops after batch of them; the entries of
// the rows earlier batches deleted are marked dead by that walk and cost the next one
// nothing. Without the order it read every entry of the webhook into a bitmap first: 35 ms a
// batch at a million attempts, every batch, a core's worth of CPU for the whole purge
// (make test-timing); with it 10 ms. (PostgreSQL still sorts when it believes
// the webhook has fewer rows than a batch, which is then cheap, or its statistics are stale.)
func (s *Store) purgeOne(ctx context.Context, id int64, batch int) (int, error) {
	n, err := s.deleted(ctx, fmt.Sprintf("purge attempts of deleted webhook %d", id), `
		DELETE FROM webhook_attempts WHERE id IN (
			SELECT id FROM webhook_attempts WHERE webhook_id = $1
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`, id, batch)
	if err != nil || n > 0 {
		return n, err
	}
	return s.deleted(ctx, fmt.Sprintf("purge deliveries of deleted webhook %d", id), `
		DELETE FROM webhook_deliveries WHERE (webhook_id, event_id) IN (
			SELECT webhook_id, event_id FROM webhook_deliveries WHERE webhook_id = $1
			ORDER BY event_id LIMIT $2 FOR UPDATE SKIP LOCKED)`, id, batch)
}

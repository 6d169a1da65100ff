package repo

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// fanOutBatch is the most events one fan-out turns into deliveries. The deliverer's poll
// fans out every 500 ms by default; at this size it keeps ahead of any rate of events the
// writers reach.
const fanOutBatch = 5000

// fanOutLock is the transaction-level advisory lock of the one fan-out that runs at a time.
// An advisory lock rather than a row lock on the cursor: taking it writes nothing, so a
// fan-out that finds no new event never gets a transaction id, and never holds back the
// horizon of the outbox's readers.
const fanOutLock = 5_274_119_905_803_016_531

// WebhookFanOut makes the deliveries of the events written since the last fan-out, in a
// transaction of its own (the claim does it in its own; see webhookFanOut).
func (s *Store) WebhookFanOut(ctx context.Context) error {
	s.prepareHot(ctx, s.db, webhookFanOutSQL)
	return s.inTx(ctx, func(tx *sqlx.Tx) error { return s.webhookFanOut(ctx, tx) })
}

// webhookFanOut makes the deliveries of the events written since the last fan-out, in the
// caller's transaction: one delivery for every live webhook whose event types include the
// event's and whose creation did not see the event committed (its created_snapshot; the
// horizon, first_event, is not enough: 00019), so an event that committed before the webhook
// is never delivered to it.
// Event writers used to do this in their own transaction; it is here so that writing an
// event costs one row (migrations/00015_events_lean_writer.sql).
//
// Like every reader of the outbox it reads only below the horizon (00014), so an event that
// commits later always has a larger id than the cursor. One transaction at a time moves the
// cursor (fanOutLock): the others skip the fan-out rather than wait. A delivery already made
// (by the trigger before 00015) is left as it is.
//
// The caller prepares webhookFanOutSQL before BEGIN (Store.prepareHot).
func (s *Store) webhookFanOut(ctx context.Context, tx *sqlx.Tx) error {
	var after int64
	// The cursor is read after the lock is taken, in a statement of its own: in READ
	// COMMITTED it then sees what the previous holder committed.
	var locked bool
	if err := tx.GetContext(ctx, &locked, `SELECT pg_try_advisory_xact_lock($1)`, int64(fanOutLock)); err != nil {
		return fmt.Errorf("webhook fan-out lock: %w", err)
	}
	if !locked {
		return nil // another replica is fanning out now
	}
	if err := tx.GetContext(ctx, &after, `SELECT after_event FROM webhook_fanout`); err != nil {
		return fmt.Errorf("webhook fan-out cursor: %w", err)
	}
	for attempt := 0; ; attempt++ {
		var page struct {
			Next *int64 `db:"next"` // the cursor after this page; nil when it made nothing
			Held bool   `db:"held"`
		}
		err := sqlx.GetContext(ctx, s.hot(ctx, s.db, tx, webhookFanOutSQL), &page, webhookFanOutSQL, after, fanOutBatch)
		if err != nil {
			return fmt.Errorf("webhook fan-out: %w", err)
		}
		// Events that committed but wait behind an older transaction still in flight: a
		// writer's transaction usually ends within milliseconds, so when nothing could be
		// made, wait a little for them (each statement reads a new snapshot) rather than
		// leave them to the next claim. When something was made, the next claim comes soon:
		// under a steady stream of writers some event is nearly always held, and waiting
		// would only re-read the horizon.
		if !page.Held || page.Next != nil || attempt >= fanOutHeldTries {
			return nil
		}
		if err := sleepCtx(ctx, eventHeldBackoff(attempt)); err != nil {
			return nil
		}
	}
}

// fanOutHeldTries bounds the waits for held events (eventHeldBackoff: about 60 ms in all).
const fanOutHeldTries = 5

// webhookFanOutSQL makes the deliveries of one page of events after $1 (at most $2), below
// the horizon, and moves the cursor past them. Prepared (Store.hot): planned at every call,
// its plan cost about as much as its run (pgbench, 2026-12-04: 1.75 ms a call unnamed, 1.06
// prepared, for a page of 450 events), and it runs twice a second.
// The page is cut as every reader of the outbox cuts it (pageBoundCTE): the exact horizon,
// which reads pg_stat_activity, only when the page reaches past the snapshot's xmin, so that
// a fan-out with nothing new to read, the idle case, reads none.
const webhookFanOutSQL = `
	WITH snap AS (SELECT pg_current_snapshot() AS s),
	page AS (
		SELECT id, type FROM events
		WHERE id > $1
		ORDER BY id LIMIT $2),
	` + pageBoundCTE + `,
	batch AS (
		SELECT page.* FROM page, bound WHERE page.id < bound.horizon),
	made AS (
		INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
		SELECT w.id, b.id, backfill_now(), backfill_now()
		FROM batch b
		JOIN webhooks w ON w.deleted_at IS NULL AND b.type = ANY (w.event_types)
			AND b.id >= w.first_event
			AND NOT coalesce(pg_visible_in_snapshot((b.id >> 12)::text::xid8, w.created_snapshot), false)
		ON CONFLICT DO NOTHING),
	moved AS (
		UPDATE webhook_fanout SET after_event = (SELECT max(id) FROM batch)
		WHERE EXISTS (SELECT 1 FROM batch))
	SELECT (SELECT max(id) FROM batch) AS next,
		EXISTS (SELECT 1 FROM page, bound WHERE page.id >= bound.horizon) AS held`

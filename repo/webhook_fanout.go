package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
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
	s.prepareHot(ctx, webhookFanOutSQL)
	var taken []EventTypeCount
	err := s.inTx(ctx, func(tx *sqlx.Tx) (err error) {
		taken, err = s.webhookFanOut(ctx, tx)
		return err
	})
	if err == nil {
		s.countEventsWritten(taken)
	}
	return err
}

// EventTypeCount is how many events of one type a webhook fan-out took.
type EventTypeCount struct {
	Type  domain.EventType `db:"type"`
	Count int              `db:"count"`
}

// countEventsWritten tells the observer what a committed fan-out took. The fan-out reads
// every event once, whichever replica runs it, so it is where events are counted: the
// replicas' listeners read none without streams, and each event is counted once in all.
// A fan-out whose COMMIT went unanswered counts nothing: its page is not taken again if it
// committed, and the metric is short by it.
func (s *Store) countEventsWritten(taken []EventTypeCount) {
	for _, c := range taken {
		s.observer.EventsWritten(string(c.Type), c.Count)
	}
}

// webhookFanOut makes the deliveries of the events written since the last fan-out, in the
// caller's transaction: one delivery for every live webhook whose event types include the
// event's and whose creation did not see the event committed (its created_snapshot; the
// horizon, first_event, is not enough: 00019), so an event that committed before the webhook
// is never delivered to it.
// It is here, not in the event writers' transactions, so that writing an event costs one
// row (migrations/00015_events_lean_writer.sql).
//
// It follows the outbox by snapshots (migrations/00021_webhook_fanout_by_snapshot.sql): it
// takes the events whose writers committed since the last fan-out's snapshot, so an event is
// taken as soon as its writer commits, however long an older transaction stays open. One
// transaction at a time does it (fanOutLock): the others skip the fan-out rather than wait.
// A delivery already made is left as it is.
//
// It answers how many events of each type it took, for the caller to count once it commits.
//
// The caller prepares webhookFanOutSQL before BEGIN (Store.prepareHot).
func (s *Store) webhookFanOut(ctx context.Context, tx *sqlx.Tx) ([]EventTypeCount, error) {
	return s.webhookFanOutPage(ctx, tx, fanOutBatch)
}

// webhookFanOutPage takes one page of at most limit events and answers how many of each type
// it took.
func (s *Store) webhookFanOutPage(ctx context.Context, tx *sqlx.Tx, limit int) ([]EventTypeCount, error) {
	// The cursor is read after the lock is taken, by a statement of its own: in READ
	// COMMITTED it then sees what the previous holder committed.
	//
	// JIT is off for the rest of the transaction: the planner cannot know how few rows the
	// snapshot's ranges hold, and on a large outbox (or one not yet analyzed) it estimated
	// the page at enough to compile it, 0.6-1 s of every 1.6 ms poll (webhooks 1.5 s late at
	// 40 events/s, most of a core burned while idle). The setting
	// is read when the statement runs, so it holds for the session's cached plan too.
	var locked bool
	if err := tx.GetContext(ctx, &locked, `SELECT pg_try_advisory_xact_lock($1) FROM set_config('jit', 'off', true)`, int64(fanOutLock)); err != nil {
		return nil, fmt.Errorf("webhook fan-out lock: %w", err)
	}
	if !locked {
		return nil, nil // another replica is fanning out now
	}
	var taken []EventTypeCount
	if err := sqlx.SelectContext(ctx, s.hot(ctx, tx, webhookFanOutSQL), &taken, webhookFanOutSQL, limit); err != nil {
		return nil, fmt.Errorf("webhook fan-out: %w", err)
	}
	return taken, nil
}

// webhookFanOutSQL makes the deliveries of one page of at most $1 events, in id order, of the
// batch the cursor is in, and moves the cursor past them. A batch is the events whose writers
// hi sees committed and lo did not: those at or past lo's xmax ("fresh") and those in lo's
// list of transactions in flight ("late"); an event's id is its writer's transaction id
// shifted left 12 bits plus an ordinal (00014), so each is a range of the primary key. hi is
// this statement's own snapshot when a batch starts, and the batch's stored snapshot while
// one is paged through (then events committed since are left to the next batch). A short
// page ends the batch: hi becomes the cursor. A fan-out that finds nothing writes nothing.
// It answers the page's events counted by type (no row for an empty page).
// Prepared (Store.hot): planned at every call, its plan costs about as much as its run
// (pgbench), and it runs twice a second.
const webhookFanOutSQL = `
	WITH cursor AS (
		SELECT after_snapshot AS lo, coalesce(batch_snapshot, pg_current_snapshot()) AS hi,
			coalesce(batch_after, -1) AS done, batch_snapshot IS NOT NULL AS paging
		FROM webhook_fanout),
	fresh AS (
		SELECT e.id, e.type FROM events e
		WHERE e.id >= (SELECT greatest(pg_snapshot_xmax(lo)::text::bigint << 12, done + 1) FROM cursor)
		  AND pg_visible_in_snapshot((e.id >> 12)::text::xid8, (SELECT hi FROM cursor))
		ORDER BY e.id LIMIT $1),
	late AS (
		SELECT l.id, l.type FROM cursor c, pg_snapshot_xip(c.lo) AS x,
		LATERAL (
			SELECT e.id, e.type FROM events e
			WHERE e.id >= greatest(x::text::bigint << 12, c.done + 1)
			  AND e.id < (x::text::bigint + 1) << 12
			  AND pg_visible_in_snapshot((e.id >> 12)::text::xid8, c.hi)
			ORDER BY e.id LIMIT $1) AS l
		ORDER BY l.id LIMIT $1),
	page AS (
		SELECT id, type FROM (SELECT * FROM fresh UNION ALL SELECT * FROM late) AS u
		ORDER BY id LIMIT $1),
	made AS (
		INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
		SELECT w.id, p.id, backfill_now(), backfill_now()
		FROM page p
		JOIN webhooks w ON w.deleted_at IS NULL AND p.type = ANY (w.event_types)
			AND p.id >= w.first_event
			AND NOT coalesce(pg_visible_in_snapshot((p.id >> 12)::text::xid8, w.created_snapshot), false)
		ON CONFLICT DO NOTHING),
	took AS (SELECT count(*) AS n, max(id) AS last FROM page),
	moved AS (
		UPDATE webhook_fanout f SET
			after_snapshot = CASE WHEN took.n < $1 THEN c.hi ELSE f.after_snapshot END,
			batch_snapshot = CASE WHEN took.n < $1 THEN NULL ELSE c.hi END,
			batch_after = CASE WHEN took.n < $1 THEN NULL ELSE took.last END
		FROM cursor c, took
		WHERE took.n > 0 OR c.paging)
	SELECT type, count(*)::int AS count FROM page GROUP BY type`

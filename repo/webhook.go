package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Webhook is an endpoint that receives events. Secret is read only by creation and delivery.
type Webhook struct {
	ID          int64          `db:"id"`
	URL         string         `db:"url"`
	EventTypes  pq.StringArray `db:"event_types"`
	Description *string        `db:"description"`
	Secret      string         `db:"secret"`
	CreatedAt   time.Time      `db:"created_at"`
}

// webhookColumns leaves the secret out: reads other than creation never show it.
const webhookColumns = `id, url, event_types, description, created_at`

// WebhookCreateParams registers a webhook; the caller fills in defaults and the secret.
type WebhookCreateParams struct {
	URL         string
	EventTypes  []string
	Description *string
	Secret      string
	// IdempotencyKey, when set, makes a retry answer the webhook the first request created,
	// with its secret.
	IdempotencyKey string
}

// WebhookCreate registers a webhook. It receives the events that had not committed when it
// was created (its transaction's snapshot did not see them; 00019). It reports replayed =
// true when it answered the webhook (secret included) that an earlier request with the same
// idempotency key created.
func (s *Store) WebhookCreate(ctx context.Context, p WebhookCreateParams) (Webhook, bool, error) {
	keyless := p
	// The secret is made up by the server for each request: not part of what was asked.
	keyless.IdempotencyKey, keyless.Secret = "", ""
	fp, err := domain.RequestFingerprint(keyless, nil)
	if err != nil {
		return Webhook{}, false, err
	}
	r := idemRequest{key: p.IdempotencyKey, op: opWebhook, fp: fp}
	replay := func(ctx context.Context, q pgrun.Queryer, ids []int64) (Webhook, error) {
		var w Webhook
		err := sqlx.GetContext(ctx, q, &w, `SELECT `+webhookColumns+`, secret FROM webhooks WHERE id = $1 AND deleted_at IS NULL`, ids[0])
		if isNoRows(err) {
			// Deleted since: the answer of the first request no longer exists.
			return Webhook{}, ErrWebhookNotFound
		}
		if err != nil {
			return Webhook{}, fmt.Errorf("replay webhook: %w", err)
		}
		return w, nil
	}
	return idempotent(ctx, s, r, replay, func(tx *sqlx.Tx) (Webhook, []int64, *string, error) {
		var w Webhook
		err := sqlx.GetContext(ctx, tx, &w, `
			INSERT INTO webhooks (url, event_types, description, secret, created_at, first_event, created_snapshot)
			VALUES ($1, $2, $3, $4, backfill_now(), event_horizon(pg_current_snapshot()), pg_current_snapshot())
			RETURNING `+webhookColumns+`, secret`,
			p.URL, pq.StringArray(p.EventTypes), p.Description, p.Secret)
		if err != nil {
			return Webhook{}, nil, nil, fmt.Errorf("insert webhook: %w", err)
		}
		return w, []int64{w.ID}, nil, nil
	})
}

// WebhookGet returns one webhook without its secret.
func (s *Store) WebhookGet(ctx context.Context, id int64) (Webhook, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Webhook, error) { return s.webhookGetOnce(ctx, q, id) })
}

// webhookGetOnce is one attempt of WebhookGet, which sends it again if its session dies.
func (s *Store) webhookGetOnce(ctx context.Context, q pgrun.Queryer, id int64) (Webhook, error) {
	var w Webhook
	err := sqlx.GetContext(ctx, q, &w, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1 AND deleted_at IS NULL`, id)
	if isNoRows(err) {
		return Webhook{}, ErrWebhookNotFound
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("get webhook %d: %w", id, err)
	}
	return w, nil
}

// WebhookList pages webhooks by id, without secrets.
func (s *Store) WebhookList(ctx context.Context, p ListParams) ([]Webhook, int, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]Webhook, int, error) {
		return s.webhookListOnce(ctx, q, p)
	})
}

// webhookListOnce is one attempt of WebhookList, which sends it again if its session dies.
func (s *Store) webhookListOnce(ctx context.Context, q pgrun.Queryer, p ListParams) ([]Webhook, int, error) {
	var total int
	if err := sqlx.GetContext(ctx, q, &total, `SELECT count(*) FROM webhooks WHERE deleted_at IS NULL`); err != nil {
		return nil, 0, fmt.Errorf("count webhooks: %w", err)
	}
	out := []Webhook{}
	err := sqlx.SelectContext(ctx, q, &out, `
		SELECT `+webhookColumns+` FROM webhooks WHERE deleted_at IS NULL ORDER BY id LIMIT $1 OFFSET $2`, p.Limit, p.Offset)
	if err != nil {
		return nil, 0, fmt.Errorf("list webhooks: %w", err)
	}
	return out, total, nil
}

// WebhookDelete marks a webhook deleted: from then on it is not found, receives no new
// delivery and none of its deliveries is attempted. It costs one row at any history size;
// the delivery log is removed later in bounded batches (WebhookPurgeDeleted). Event writers
// read webhooks without locking them, so the mark waits for no writer and no writer for it.
func (s *Store) WebhookDelete(ctx context.Context, id int64) error {
	var n int64
	err := s.withRetry(ctx, func(a attempt) error {
		res, err := a.db.ExecContext(a.ctx, `UPDATE webhooks SET deleted_at = backfill_now()
			WHERE id = $1 AND deleted_at IS NULL AND `+statementLockWait("$2"), id, a.lockWait)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete webhook %d: %w", id, err)
	}
	if n == 0 {
		return ErrWebhookNotFound
	}
	return nil
}

// WebhookAttempt is one entry of a webhook's delivery log.
type WebhookAttempt struct {
	EventID       int64      `db:"event_id"`
	Attempt       int        `db:"attempt"`
	StatusCode    *int       `db:"status_code"`
	Error         *string    `db:"error"`
	AttemptedAt   time.Time  `db:"attempted_at"`
	NextAttemptAt *time.Time `db:"next_attempt_at"`
	DeliveredAt   *time.Time `db:"delivered_at"`
}

// WebhookAttemptListParams pages a webhook's delivery log, optionally of one event.
type WebhookAttemptListParams struct {
	WebhookID int64
	EventID   *int64
	Limit     int
	Offset    int
}

// WebhookAttemptList pages a webhook's delivery attempts in the order they were made.
// It reads in a transaction, which already rides a failover (runTx), so it needs no readTwo.
func (s *Store) WebhookAttemptList(ctx context.Context, p WebhookAttemptListParams) ([]WebhookAttempt, int, error) {
	out := []WebhookAttempt{}
	var total int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		out, total = []WebhookAttempt{}, 0
		var exists bool
		if err := sqlx.GetContext(ctx, tx, &exists, `SELECT EXISTS (SELECT 1 FROM webhooks WHERE id = $1 AND deleted_at IS NULL)`, p.WebhookID); err != nil {
			return fmt.Errorf("find webhook %d: %w", p.WebhookID, err)
		}
		if !exists {
			return ErrWebhookNotFound
		}
		// $2 IS NULL: one statement for both the filtered and the unfiltered log.
		const where = `WHERE webhook_id = $1 AND ($2::bigint IS NULL OR event_id = $2)`
		if err := sqlx.GetContext(ctx, tx, &total, `SELECT count(*) FROM webhook_attempts `+where, p.WebhookID, p.EventID); err != nil {
			return fmt.Errorf("count webhook attempts: %w", err)
		}
		err := sqlx.SelectContext(ctx, tx, &out, `
			SELECT event_id, attempt, status_code, error, attempted_at, next_attempt_at, delivered_at
			FROM webhook_attempts `+where+` ORDER BY id LIMIT $3 OFFSET $4`,
			p.WebhookID, p.EventID, p.Limit, p.Offset)
		if err != nil {
			return fmt.Errorf("list webhook attempts: %w", err)
		}
		return nil
	})
	return out, total, err
}

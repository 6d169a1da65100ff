package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// WebhookEvent is an events row as a webhook delivers it.
//
// The events branch serves the same rows on GET /events; the two are one conversion once
// both have landed (see webhooks.EventJSON).
type WebhookEvent struct {
	ID         int64     `db:"event_id"`
	Type       string    `db:"event_type"`
	BackfillID int64     `db:"backfill_id"`
	DagID      string    `db:"dag_id"`
	OccurredAt time.Time `db:"occurred_at"`
	Data       JSON      `db:"data"`
}

// WebhookDue is one claimed delivery: which event goes where, under which attempt number.
type WebhookDue struct {
	WebhookID int64  `db:"webhook_id"`
	Attempt   int    `db:"attempt"`
	URL       string `db:"url"`
	Secret    string `db:"secret"`
	// Now is the database's clock at the claim: the webhook-timestamp of the attempt.
	Now time.Time `db:"now"`
	WebhookEvent
}

// attemptInFlight is what the log says of an attempt until its outcome is recorded. If the
// process stops during the attempt it stays, truthfully: nobody knows what the receiver got.
const attemptInFlight = "no outcome recorded: the attempt is in flight, or the process making it stopped"

// WebhookDeliveryClaim takes up to limit due deliveries, the earliest first, skipping rows
// another replica is claiming (FOR UPDATE SKIP LOCKED), and leases them for lease: they are
// due again then unless their outcome is recorded first, so a delivery whose process dies
// is retried by any replica (at least once). Each claim starts an attempt in the log.
func (s *Store) WebhookDeliveryClaim(ctx context.Context, limit int, lease time.Duration) ([]WebhookDue, error) {
	var due []WebhookDue
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		due = nil
		return sqlx.SelectContext(ctx, tx, &due, `
			WITH due AS (
				SELECT webhook_id, event_id FROM webhook_deliveries
				WHERE state = 'pending' AND next_attempt_at <= backfill_now()
				ORDER BY next_attempt_at
				LIMIT $1
				FOR UPDATE SKIP LOCKED
			), claimed AS (
				UPDATE webhook_deliveries d
				SET attempts = d.attempts + 1,
					next_attempt_at = backfill_now() + make_interval(secs => $2)
				FROM due
				WHERE d.webhook_id = due.webhook_id AND d.event_id = due.event_id
				RETURNING d.webhook_id, d.event_id, d.attempts
			), logged AS (
				INSERT INTO webhook_attempts (webhook_id, event_id, attempt, error, attempted_at)
				SELECT webhook_id, event_id, attempts, $3, backfill_now() FROM claimed
			)
			SELECT c.webhook_id, c.attempts AS attempt, w.url, w.secret, backfill_now() AS now,
				e.id AS event_id, e.type AS event_type, e.backfill_id, e.dag_id, e.occurred_at, e.data
			FROM claimed c
			JOIN webhooks w ON w.id = c.webhook_id
			JOIN events e ON e.id = c.event_id
			ORDER BY e.id`,
			limit, lease.Seconds(), attemptInFlight)
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	return due, nil
}

// WebhookOutcome is the result of one attempt.
type WebhookOutcome struct {
	WebhookID int64
	EventID   int64
	Attempt   int
	// StatusCode is the receiver's answer; nil when no HTTP answer came.
	StatusCode *int
	// Error says why the attempt did not deliver; nil when it delivered.
	Error *string
	// Delivered is a 2xx answer in time.
	Delivered bool
	// RetryAfter is when the next attempt is due, from now, after a failure; nil gives up.
	RetryAfter *time.Duration
}

// WebhookDeliveryRecord writes an attempt's outcome into the log and into its delivery. A
// failure counts only while the attempt is still the delivery's latest (a claim that expired
// and was taken again must not reschedule the newer attempt); a success ends the delivery
// whichever attempt brought it. It reports whether the delivery row changed.
func (s *Store) WebhookDeliveryRecord(ctx context.Context, o WebhookOutcome) (bool, error) {
	var retrySecs *float64
	if o.RetryAfter != nil {
		v := o.RetryAfter.Seconds()
		retrySecs = &v
	}
	var changed bool
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		return sqlx.GetContext(ctx, tx, &changed, `
			WITH d AS (
				UPDATE webhook_deliveries SET
					state = CASE WHEN $4 THEN 'delivered' WHEN $5::float8 IS NULL THEN 'failed' ELSE 'pending' END,
					next_attempt_at = CASE WHEN $4 OR $5::float8 IS NULL THEN NULL
						ELSE backfill_now() + make_interval(secs => $5::float8) END,
					delivered_at = CASE WHEN $4 THEN backfill_now() END
				WHERE webhook_id = $1 AND event_id = $2 AND state = 'pending' AND (attempts = $3 OR $4)
				RETURNING next_attempt_at
			), a AS (
				UPDATE webhook_attempts SET
					status_code = $6, error = $7,
					next_attempt_at = (SELECT next_attempt_at FROM d),
					delivered_at = CASE WHEN $4 THEN backfill_now() END
				WHERE webhook_id = $1 AND event_id = $2 AND attempt = $3
			)
			SELECT EXISTS (SELECT 1 FROM d)`,
			o.WebhookID, o.EventID, o.Attempt, o.Delivered, retrySecs, o.StatusCode, o.Error)
	})
	if err != nil {
		return false, fmt.Errorf("record webhook attempt %d of event %d to webhook %d: %w", o.Attempt, o.EventID, o.WebhookID, err)
	}
	return changed, nil
}

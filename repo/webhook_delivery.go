package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// WebhookDue is one claimed delivery: which event goes where, under which attempt number.
type WebhookDue struct {
	WebhookID int64  `db:"webhook_id"`
	Attempt   int    `db:"attempt"`
	URL       string `db:"url"`
	Secret    string `db:"secret"`
	// Now is the database's clock at the claim: the webhook-timestamp of the attempt.
	Now time.Time `db:"now"`
	domain.Event
}

// WebhookClaimParams asks for due deliveries, endpoint by endpoint.
type WebhookClaimParams struct {
	// PerEndpoint is the most deliveries taken for one webhook (its free attempt slots on
	// this replica); Free overrides it for webhooks that already have attempts in flight
	// (a value of 0 takes none of theirs).
	PerEndpoint int
	Free        map[int64]int
	// Limit bounds the whole claim; endpoints share it round-robin.
	Limit int
	Lease time.Duration
	// FanOut first makes the deliveries of the events written since the last fan-out
	// (webhookFanOut), in the claim's transaction.
	FanOut bool
}

// WebhookDeliveryClaim takes due deliveries, each webhook's earliest first, at most
// PerEndpoint (or its Free) per webhook, and interleaves the webhooks (each one's first, then
// each one's second, ...) up to Limit: an endpoint with a long backlog cannot fill the claim.
// Rows another replica is claiming are skipped (FOR UPDATE SKIP LOCKED); the claimed ones are
// leased for Lease: they are due again then unless their outcome is recorded first, so a
// delivery whose process dies is retried by any replica (at least once). Each claim starts
// an attempt in the log, and closes the previous attempt as a timeout if its process never
// recorded an outcome. Deleted webhooks are not claimed. With FanOut the claim first makes
// the deliveries of the events written since the last fan-out (webhookFanOut).
func (s *Store) WebhookDeliveryClaim(ctx context.Context, p WebhookClaimParams) ([]WebhookDue, error) {
	ids := make(pq.Int64Array, 0, len(p.Free))
	free := make(pq.Int64Array, 0, len(p.Free))
	for id, n := range p.Free {
		ids, free = append(ids, id), append(free, int64(max(n, 0)))
	}
	var due []WebhookDue
	var taken []EventTypeCount
	if p.FanOut {
		s.prepareHot(ctx, webhookFanOutSQL)
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) (err error) {
		due, taken = nil, nil
		if p.FanOut {
			if taken, err = s.webhookFanOut(ctx, tx); err != nil {
				return err
			}
		}
		return sqlx.SelectContext(ctx, tx, &due, `
			WITH room AS (
				SELECT w.id, coalesce(f.free, $1) AS free
				FROM webhooks w
				LEFT JOIN unnest($2::bigint[], $3::bigint[]) AS f(webhook_id, free) ON f.webhook_id = w.id
				WHERE w.deleted_at IS NULL
			), candidates AS (
				SELECT d.webhook_id, d.event_id,
					row_number() OVER (PARTITION BY d.webhook_id ORDER BY d.next_attempt_at) AS turn
				FROM room r
				CROSS JOIN LATERAL (
					SELECT webhook_id, event_id, next_attempt_at FROM webhook_deliveries d
					WHERE d.webhook_id = r.id AND d.state = 'pending' AND d.next_attempt_at <= backfill_now()
					ORDER BY d.next_attempt_at
					LIMIT r.free
					FOR UPDATE SKIP LOCKED
				) d
				WHERE r.free > 0
			), due AS (
				SELECT webhook_id, event_id FROM candidates ORDER BY turn, webhook_id LIMIT $4
			), claimed AS (
				UPDATE webhook_deliveries d
				SET attempts = d.attempts + 1,
					next_attempt_at = backfill_now() + make_interval(secs => $5)
				FROM due
				WHERE d.webhook_id = due.webhook_id AND d.event_id = due.event_id
				RETURNING d.webhook_id, d.event_id, d.attempts
			), lost AS (
				UPDATE webhook_attempts a SET error = $6
				FROM claimed c
				WHERE a.webhook_id = c.webhook_id AND a.event_id = c.event_id AND a.attempt = c.attempts - 1
				  AND a.status_code IS NULL AND a.error IS NULL AND a.delivered_at IS NULL
			), logged AS (
				INSERT INTO webhook_attempts (webhook_id, event_id, attempt, attempted_at)
				SELECT webhook_id, event_id, attempts, backfill_now() FROM claimed
			)
			SELECT c.webhook_id, c.attempts AS attempt, w.url, w.secret, backfill_now() AS now,
				`+eventColumnsOf("e")+`
			FROM claimed c
			JOIN webhooks w ON w.id = c.webhook_id
			JOIN events e ON e.id = c.event_id
			ORDER BY e.id`,
			p.PerEndpoint, ids, free, p.Limit, p.Lease.Seconds(), string(domain.DeliveryErrorTimeout))
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	s.countEventsWritten(taken)
	return due, nil
}

// WebhookOutcome is the result of one attempt.
type WebhookOutcome struct {
	WebhookID int64
	EventID   int64
	Attempt   int
	// StatusCode is the receiver's answer; nil when no HTTP answer came.
	StatusCode *int
	// Error is the kind of failure; nil when it delivered.
	Error *domain.DeliveryError
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

package repo

import (
	"context"
	"errors"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Idempotency keys, one table and one path for every creating POST (a backfill or its
// retry, a claim, a webhook, a manual run). The key is recorded in the same transaction as
// the change it answers, so that the key exists exactly when the change does: a request whose
// COMMIT was lost (503 outcome_unknown) and that is sent again with its key finds either the
// key, and is answered from it, or nothing, and does the change for the first time.

// Operations a key is stored under. Keys are global: a key sent with another kind of request
// is a different request.
const (
	opBackfill = "backfill"
	opClaim    = "claim"
	opWebhook  = "webhook"
	opDagRun   = "dag_run"
)

// idemRequest is one creating request under an Idempotency-Key.
type idemRequest struct {
	key string
	op  string
	fp  domain.Fingerprint
}

// idemLookup reads r's key: the ids that its first request answered when r is that request,
// ErrIdempotencyKeyReused when it is another, found = false when the key is not stored. The
// conf is compared by PostgreSQL as jsonb values (see domain.RequestHash).
func idemLookup(ctx context.Context, q sqlx.QueryerContext, r idemRequest) ([]int64, bool, error) {
	var stored struct {
		Same bool          `db:"same"`
		IDs  pq.Int64Array `db:"result_ids"`
	}
	err := sqlx.GetContext(ctx, q, &stored, `
		SELECT operation = $2 AND request_hash = $3 AND dag_run_conf IS NOT DISTINCT FROM $4::jsonb AS same,
			result_ids
		FROM idempotency_keys WHERE key = $1`, r.key, r.op, r.fp.Hash, JSON(r.fp.Conf))
	if isNoRows(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read idempotency key: %w", err)
	}
	if !stored.Same {
		return nil, false, ErrIdempotencyKeyReused
	}
	return stored.IDs, true, nil
}

// idemRecord stores r's key with the ids it answers, inside the transaction of the change.
// dagID is the DAG those rows belong to (nil for none), whose deletion takes the key with
// it. A key that a concurrent request committed first is errIdempotencyKeyTaken; one that
// such a request holds uncommitted makes this insert wait for its outcome.
func idemRecord(ctx context.Context, tx sqlx.ExecerContext, r idemRequest, ids []int64, dagID *string) error {
	if ids == nil {
		ids = []int64{}
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO idempotency_keys (key, operation, request_hash, dag_run_conf, result_ids, dag_id, created_at)
		VALUES ($1, $2, $3, $4::jsonb, $5, $6, backfill_now())`,
		r.key, r.op, r.fp.Hash, JSON(r.fp.Conf), pq.Int64Array(ids), dagID)
	if uniqueViolation(err) == constraintIdempotencyKeyKey {
		return errIdempotencyKeyTaken
	}
	if err != nil {
		return fmt.Errorf("insert idempotency key: %w", err)
	}
	return nil
}

// idemReplay answers a request from its stored key: what replay makes of the ids as they are
// now, once it is durable (the first request's commit may still be waiting for its
// synchronous standby: PostgreSQL shows it to other sessions meanwhile).
func idemReplay[T any](ctx context.Context, s *Store, ids []int64, replay func(ctx context.Context, q pgrun.Queryer, ids []int64) (T, error)) (T, error) {
	out, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (T, error) { return replay(ctx, q, ids) })
	if err == nil {
		err = s.awaitDurable(ctx)
	}
	return out, err
}

// idempotent runs change in a READ COMMITTED transaction that also records r's key, or, when
// the key is already stored, answers from it without changing anything (replayed = true).
// change returns its answer, the ids to store with the key and the DAG they belong to; nil ids
// store no key (a change that changed nothing: its retry may as well do it afresh). With no
// key it runs change alone.
func idempotent[T any](ctx context.Context, s *Store, r idemRequest,
	replay func(ctx context.Context, q pgrun.Queryer, ids []int64) (T, error),
	change func(tx *sqlx.Tx) (T, []int64, *string, error),
) (T, bool, error) {
	var zero T
	run := func() (T, error) {
		var out T
		err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			res, ids, dagID, err := change(tx)
			if err != nil {
				return err
			}
			if r.key != "" && ids != nil {
				if err := idemRecord(ctx, tx, r, ids, dagID); err != nil {
					return err
				}
			}
			out = res
			return nil
		})
		return out, err
	}
	if r.key == "" {
		out, err := run()
		return out, false, err
	}
	// Each pass follows a concurrent request with the same key that committed first (the
	// look-up then finds it) or rolled back (the change is tried again); a few are plenty.
	for range maxCreatePasses {
		ids, found, err := readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]int64, bool, error) { return idemLookup(ctx, q, r) })
		if err != nil {
			return zero, false, err
		}
		if found {
			out, err := idemReplay(ctx, s, ids, replay)
			return out, err == nil, err
		}
		out, err := run()
		if errors.Is(err, errIdempotencyKeyTaken) {
			continue
		}
		if lostToSameKey(err) {
			// The change ran into what a concurrent request with this key committed first
			// (a manual run's logical date, the DAG's active backfill) before it reached the
			// key: when that request holds the key now, this one is its retry.
			ids, found, lerr := readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]int64, bool, error) { return idemLookup(ctx, q, r) })
			if lerr == nil && found {
				out, err := idemReplay(ctx, s, ids, replay)
				return out, err == nil, err
			}
		}
		return out, false, err
	}
	return zero, false, fmt.Errorf("%w: the idempotency key kept changing hands", ErrRetriesExhausted)
}

// lostToSameKey: a change's conflict that a concurrent request making the same change can
// cause, and so may be its retry's answer.
func lostToSameKey(err error) bool {
	return errors.Is(err, ErrRunAlreadyExists) || errors.Is(err, ErrBackfillAlreadyRunning)
}

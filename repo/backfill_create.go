package repo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// BackfillCreate creates a backfill, its slots and its runs in one SERIALIZABLE transaction.
// It reports replayed = true when an earlier request with the same idempotency key created it.
func (s *Store) BackfillCreate(ctx context.Context, p BackfillCreateParams) (Backfill, bool, error) {
	hash, err := requestHash(p)
	if err != nil {
		return Backfill{}, false, err
	}
	// Replays are the common case for a retried request: answer them without planning.
	if b, ok, err := s.idempotentReplay(ctx, p.IdempotencyKey, hash); err != nil || ok {
		return b, ok, err
	}
	// Each pass of this loop follows a concurrent request that changed the ground between our
	// transaction and our look-up (a winner that finished, a key holder that rolled back).
	// That takes a very unlucky interleaving; a few passes are plenty, and the bound keeps a
	// pathological case from spinning.
	for range maxCreatePasses {
		var b Backfill
		err := s.inSerializableTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			b, err = s.backfillInsertAll(ctx, tx, p, hash)
			return err
		})
		switch {
		case err == nil:
			s.observer.BackfillCreated(b.State)
			return b, false, nil
		case errors.Is(err, errIdempotencyKeyTaken):
			// A concurrent request with this key committed first.
			b, ok, err := s.idempotentReplay(ctx, p.IdempotencyKey, hash)
			if err == nil && !ok {
				continue // it rolled back after all: try again
			}
			return b, ok, err
		case errors.Is(err, errBackfillUniqueViolation):
			id, found, lerr := s.activeBackfillID(ctx, p.DagID)
			if lerr != nil {
				return Backfill{}, false, lerr
			}
			if !found {
				continue // the winner finished in between: the DAG is free again
			}
			return Backfill{}, false, &BackfillAlreadyRunningError{ActiveBackfillID: id}
		default:
			return Backfill{}, false, err
		}
	}
	return Backfill{}, false, fmt.Errorf("%w: the DAG's active backfill kept changing", ErrRetriesExhausted)
}

const maxCreatePasses = 5

// backfillInsertAll is the body of the creating transaction. It inserts the backfill first,
// blindly, so that a second request for the DAG fails fast on backfills_one_active_per_dag;
// reading that index first would add page-level predicate locks that make creations for
// different DAGs fail each other with 40001.
func (s *Store) backfillInsertAll(ctx context.Context, tx *sqlx.Tx, p BackfillCreateParams, hash string) (Backfill, error) {
	now := s.clock()
	dag, err := dagGet(ctx, tx, p.DagID, "")
	if err != nil {
		return Backfill{}, err
	}
	slots, err := s.planSlots(dag, p, now)
	if err != nil {
		return Backfill{}, err
	}
	if len(slots) == 0 {
		return Backfill{}, fmt.Errorf("%w: no schedule tick in the window has ended", ErrNoRunsToCreate)
	}
	if p.IdempotencyKey != "" {
		_, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (key, request_hash, created_at) VALUES ($1, $2, $3)`,
			p.IdempotencyKey, hash, now)
		if uniqueViolation(err) == constraintIdempotencyKeyKey {
			return Backfill{}, errIdempotencyKeyTaken
		}
		if err != nil {
			return Backfill{}, fmt.Errorf("insert idempotency key: %w", err)
		}
	}
	var id int64
	err = sqlx.GetContext(ctx, tx, &id, `
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
			max_active_runs, description, state, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $9)
		RETURNING id`,
		p.DagID, p.FromDate, p.ToDate, p.RunBackwards, jsonParam(p.DagRunConf), p.ReprocessBehavior,
		p.MaxActiveRuns, p.Description, now)
	if uniqueViolation(err) == constraintOneActivePerDag {
		return Backfill{}, errBackfillUniqueViolation
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("insert backfill: %w", err)
	}
	if err := decideSlots(ctx, tx, p.DagID, p.ReprocessBehavior, slots); err != nil {
		return Backfill{}, err
	}
	if err := reprocessRuns(ctx, tx, id, p.DagRunConf, slots, now); err != nil {
		return Backfill{}, err
	}
	if err := insertRunsAndSlots(ctx, tx, id, p, slots, now); err != nil {
		return Backfill{}, err
	}
	skipped := 0
	for _, sl := range slots {
		if sl.Action == ActionSkip {
			skipped++
		}
	}
	// A backfill whose every slot is skipped has nothing to wait for: it is born succeeded,
	// after its insert as 'running' has proven that no other backfill of the DAG is active.
	var b Backfill
	err = sqlx.GetContext(ctx, tx, &b, `
		UPDATE backfills SET num_skipped = $2,
			state = CASE WHEN $3 THEN 'succeeded' ELSE state END,
			completed_at = CASE WHEN $3 THEN $4::timestamptz END
		WHERE id = $1
		RETURNING `+backfillColumns, id, skipped, skipped == len(slots), now)
	if err != nil {
		return Backfill{}, fmt.Errorf("finish backfill %d: %w", id, err)
	}
	if p.IdempotencyKey != "" {
		if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET backfill_id = $2 WHERE key = $1`, p.IdempotencyKey, id); err != nil {
			return Backfill{}, fmt.Errorf("link idempotency key: %w", err)
		}
	}
	return b, nil
}

// reprocessRuns takes over the runs that slots reprocess: it first freezes their state in the
// slot listing of the (terminal) backfill that owned them, then clears them back to queued.
func reprocessRuns(ctx context.Context, tx *sqlx.Tx, backfillID int64, conf JSON, slots []PlannedSlot, now time.Time) error {
	var ids []int64
	var ordinals []int64
	for _, sl := range slots {
		if sl.Action == ActionReprocess {
			ids = append(ids, sl.ExistingRunID)
			ordinals = append(ordinals, int64(sl.SortOrdinal))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `
		UPDATE backfill_dag_runs s SET frozen_state = r.state
		FROM dag_runs r
		WHERE r.id = ANY($1) AND s.dag_run_id = r.id AND s.backfill_id = r.backfill_id AND s.frozen_state IS NULL`,
		pq.Array(ids))
	if err != nil {
		return fmt.Errorf("freeze taken-over slots: %w", err)
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE dag_runs r SET state = 'queued', backfill_id = $3, backfill_sort_ordinal = u.ordinal,
			attempt = 1, conf = coalesce($4::jsonb, r.conf), worker_id = NULL, queued_at = $5,
			start_date = NULL, end_date = NULL, lease_expires_at = NULL, lease_seconds = NULL
		FROM unnest($1::bigint[], $2::int[]) AS u(id, ordinal)
		WHERE r.id = u.id AND r.state IN ('success', 'failed', 'canceled')`,
		pq.Array(ids), pq.Array(ordinals), backfillID, jsonParam(conf), now)
	if err != nil {
		return fmt.Errorf("reprocess runs: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		// A run left its terminal state after we read it: decide again from a fresh snapshot.
		return fmt.Errorf("%w: %d of %d runs reprocessed (%v)", errConcurrentRunForDate, n, len(ids), err)
	}
	return nil
}

// insertRunsAndSlots writes the new runs and every slot row in one statement: the slots are
// passed as parallel arrays and unnested, so 100,000 slots cost one round trip.
func insertRunsAndSlots(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, slots []PlannedSlot, now time.Time) error {
	n := len(slots)
	ordinals := make(pq.Int64Array, n)
	dates := make(pq.StringArray, n)
	ends := make(pq.StringArray, n)
	runIDs := make(pq.StringArray, n)
	existing := make(pq.Int64Array, n)
	reasons := make(pq.StringArray, n)
	for i, sl := range slots {
		ordinals[i] = int64(sl.SortOrdinal)
		dates[i] = sl.LogicalDate.Format(time.RFC3339Nano)
		ends[i] = sl.IntervalEnd.Format(time.RFC3339Nano)
		existing[i] = sl.ExistingRunID
		if sl.Action == ActionCreate {
			runIDs[i] = RunIDFor(RunTypeBackfill, sl.LogicalDate)
		}
		if sl.ExceptionReason != nil {
			reasons[i] = *sl.ExceptionReason
		}
	}
	_, err := tx.ExecContext(ctx, `
		WITH slot AS (
			SELECT * FROM unnest($2::int[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::bigint[], $7::text[])
				AS s(sort_ordinal, logical_date, interval_end, run_id, existing_run_id, exception_reason)
		), created AS (
			INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
				run_type, backfill_id, backfill_sort_ordinal, conf, attempt, queued_at)
			SELECT $8, run_id, logical_date, logical_date, interval_end, 'queued',
				'backfill', $1, sort_ordinal, $9::jsonb, 1, $10
			FROM slot WHERE run_id <> ''
			RETURNING id, backfill_sort_ordinal
		)
		INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id, exception_reason)
		SELECT $1, s.sort_ordinal, s.logical_date, coalesce(c.id, nullif(s.existing_run_id, 0)), nullif(s.exception_reason, '')
		FROM slot s LEFT JOIN created c ON c.backfill_sort_ordinal = s.sort_ordinal`,
		backfillID, ordinals, dates, ends, runIDs, existing, reasons, p.DagID, jsonParam(p.DagRunConf), now)
	switch uniqueViolation(err) {
	case constraintRunPerDate, constraintRunIDPerDag:
		// A manual run for one of the dates committed after our snapshot: decide again.
		return fmt.Errorf("%w: %w", errConcurrentRunForDate, err)
	}
	if err != nil {
		return fmt.Errorf("insert runs and slots: %w", err)
	}
	return nil
}

// activeBackfillID looks up the DAG's active backfill after the unique index refused ours.
func (s *Store) activeBackfillID(ctx context.Context, dagID string) (int64, bool, error) {
	var id int64
	err := sqlx.GetContext(ctx, s.db, &id,
		`SELECT id FROM backfills WHERE dag_id = $1 AND state IN ('running', 'paused', 'canceling')`, dagID)
	if isNoRows(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("find active backfill of %q: %w", dagID, err)
	}
	return id, true, nil
}

// idempotentReplay answers a request whose key is already stored: the backfill as it is now
// when the request is the same, ErrIdempotencyKeyReused when it differs.
func (s *Store) idempotentReplay(ctx context.Context, key, hash string) (Backfill, bool, error) {
	if key == "" {
		return Backfill{}, false, nil
	}
	var stored struct {
		Hash       string `db:"request_hash"`
		BackfillID *int64 `db:"backfill_id"`
	}
	err := sqlx.GetContext(ctx, s.db, &stored, `SELECT request_hash, backfill_id FROM idempotency_keys WHERE key = $1`, key)
	if isNoRows(err) {
		return Backfill{}, false, nil
	}
	if err != nil {
		return Backfill{}, false, fmt.Errorf("read idempotency key: %w", err)
	}
	if stored.Hash != hash {
		return Backfill{}, false, ErrIdempotencyKeyReused
	}
	if stored.BackfillID == nil {
		return Backfill{}, false, fmt.Errorf("idempotency key %q has no backfill", key)
	}
	b, err := s.BackfillGet(ctx, *stored.BackfillID)
	return b, err == nil, err
}

// requestHash fingerprints a request after defaults are filled in, so that the same request
// sent twice matches whatever its JSON spelling (key order, spacing, time zone of the dates).
func requestHash(p BackfillCreateParams) (string, error) {
	var conf any
	if len(p.DagRunConf) > 0 {
		if err := json.Unmarshal(p.DagRunConf, &conf); err != nil {
			return "", fmt.Errorf("hash request: dag_run_conf: %w", err)
		}
	}
	canonical, err := json.Marshal(struct {
		DagID             string  `json:"dag_id"`
		FromDate          string  `json:"from_date"`
		ToDate            string  `json:"to_date"`
		RunBackwards      bool    `json:"run_backwards"`
		DagRunConf        any     `json:"dag_run_conf"`
		ReprocessBehavior string  `json:"reprocess_behavior"`
		MaxActiveRuns     int     `json:"max_active_runs"`
		Description       *string `json:"description"`
	}{p.DagID, p.FromDate.UTC().Format(time.RFC3339Nano), p.ToDate.UTC().Format(time.RFC3339Nano),
		p.RunBackwards, conf, p.ReprocessBehavior, p.MaxActiveRuns, p.Description})
	if err != nil {
		return "", fmt.Errorf("hash request: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}

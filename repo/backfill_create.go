package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Answer what is wrong with the request itself (404, 422) before what is in its way
	// (409); then, as a fast path, refuse a DAG that has an active backfill before any
	// work. That read decides nothing by itself: inside the transaction the unique index is
	// the arbiter.
	dag, err := s.DagGet(ctx, p.DagID)
	if err != nil {
		return Backfill{}, false, err
	}
	now, err := dbNow(ctx, s.db)
	if err != nil {
		return Backfill{}, false, err
	}
	plan, err := s.planSlots(dag, p, now)
	if err != nil {
		return Backfill{}, false, err
	}
	if len(plan) == 0 {
		return Backfill{}, false, fmt.Errorf("%w: no schedule tick in the window has ended", ErrNoRunsToCreate)
	}
	if id, found, err := s.activeBackfillID(ctx, p.DagID); err != nil || found {
		if err != nil {
			return Backfill{}, false, err
		}
		return s.alreadyRunning(ctx, p.IdempotencyKey, hash, id)
	}
	// Each pass of this loop follows a concurrent request that changed the ground between our
	// transaction and our look-up (a winner that finished, a key holder that rolled back).
	// That takes a very unlucky interleaving; a few passes are plenty, and the bound keeps a
	// pathological case from spinning.
	for range maxCreatePasses {
		var b Backfill
		err := s.inSerializableTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			b, err = s.backfillInsertAll(ctx, tx, p, hash, dag, plan)
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
			return s.alreadyRunning(ctx, p.IdempotencyKey, hash, id)
		default:
			return Backfill{}, false, err
		}
	}
	return Backfill{}, false, fmt.Errorf("%w: the DAG's active backfill kept changing", ErrRetriesExhausted)
}

const maxCreatePasses = 5

// backfillInsertAll is the body of the creating transaction. It is written so that two
// creations for different DAGs never read what the other writes, because under SERIALIZABLE
// every such read takes page-level predicate locks that make unrelated creations abort each
// other: the runs are inserted blindly (ON CONFLICT DO NOTHING checks uniqueness without
// predicate locks), existing runs are read only for the dates that conflicted, and the
// backfill row is inserted last, with its counters, so that nothing reads it back. That last
// insert is where backfills_one_active_per_dag refuses a second active backfill for the DAG.
//
// planned is the plan made from planDag before the transaction; it is reused (copied: a
// plan is mutated as slots are decided) unless the DAG's schedule changed since.
func (s *Store) backfillInsertAll(ctx context.Context, tx *sqlx.Tx, p BackfillCreateParams, hash fingerprint, planDag Dag, planned []PlannedSlot) (Backfill, error) {
	// The transaction's own "now" (backfill_now() is now(), the transaction's start), read
	// once: it stamps every row this transaction writes.
	now, err := dbNow(ctx, tx)
	if err != nil {
		return Backfill{}, err
	}
	dag, err := dagGet(ctx, tx, p.DagID, "")
	if err != nil {
		return Backfill{}, err
	}
	slots := slices.Clone(planned)
	if dag.Schedule != planDag.Schedule || dag.Timezone != planDag.Timezone {
		if slots, err = s.planSlots(dag, p, now); err != nil {
			return Backfill{}, err
		}
	}
	if len(slots) == 0 {
		return Backfill{}, fmt.Errorf("%w: no schedule tick in the window has ended", ErrNoRunsToCreate)
	}
	// A creation is one large statement planned once: JIT compiling it costs more (about
	// 140 ms at 100,000 slots) than it saves.
	if _, err := tx.ExecContext(ctx, `SET LOCAL jit = off`); err != nil {
		return Backfill{}, fmt.Errorf("set jit: %w", err)
	}
	var id int64
	if err := sqlx.GetContext(ctx, tx, &id, `SELECT nextval(pg_get_serial_sequence('backfills', 'id'))`); err != nil {
		return Backfill{}, fmt.Errorf("allocate backfill id: %w", err)
	}
	if p.IdempotencyKey != "" {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO idempotency_keys (key, request_hash, dag_run_conf, backfill_id, created_at)
			VALUES ($1, $2, $3::jsonb, $4, $5)`,
			p.IdempotencyKey, hash.hash, jsonParam(hash.conf), id, now)
		if uniqueViolation(err) == constraintIdempotencyKeyKey {
			return Backfill{}, errIdempotencyKeyTaken
		}
		if err != nil {
			return Backfill{}, fmt.Errorf("insert idempotency key: %w", err)
		}
	}
	if len(slots) > largeBackfill {
		// The slot insert hashes and sorts every slot; let it do so in memory.
		if _, err := tx.ExecContext(ctx, `SET LOCAL work_mem = '64MB'`); err != nil {
			return Backfill{}, fmt.Errorf("set work_mem: %w", err)
		}
	}
	taken, err := insertNewRuns(ctx, tx, id, p, slots, now)
	if err != nil {
		return Backfill{}, err
	}
	if len(taken) > 0 {
		if err := settleTakenSlots(ctx, tx, id, p, slots, taken, now); err != nil {
			return Backfill{}, err
		}
	}
	// The slots are settled: this is the plan the backfill is created from.
	planHash, err := checkPlan(dag, slots, p.IfMatch)
	if err != nil {
		return Backfill{}, err
	}
	var queued, skipped int
	for _, sl := range slots {
		if sl.Action == ActionSkip {
			skipped++
		} else {
			queued++
		}
	}
	var b Backfill
	err = sqlx.GetContext(ctx, tx, &b, `
		INSERT INTO backfills (id, dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
			max_active_runs, description, state, created_at, updated_at, num_queued, num_skipped,
			max_failed_runs, plan_hash, parent_backfill_id)
		OVERRIDING SYSTEM VALUE
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'running', $10, $10, $11, $12, $13, $14, $15)
		RETURNING `+backfillColumns,
		id, p.DagID, p.FromDate, p.ToDate, p.RunBackwards, jsonParam(p.DagRunConf), p.ReprocessBehavior,
		p.MaxActiveRuns, p.Description, now, queued, skipped, p.MaxFailedRuns, planHash, p.ParentBackfillID)
	if uniqueViolation(err) == constraintOneActivePerDag {
		return Backfill{}, errBackfillUniqueViolation
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("insert backfill: %w", err)
	}
	if queued > 0 {
		return b, nil
	}
	// Every slot was skipped: nothing to wait for, so the backfill is born succeeded, once
	// its insert as 'running' has proven that no other backfill of the DAG is active.
	err = sqlx.GetContext(ctx, tx, &b, `
		UPDATE backfills SET state = 'succeeded', completed_at = $2 WHERE id = $1
		RETURNING `+backfillColumns, id, now)
	if err != nil {
		return Backfill{}, fmt.Errorf("finish all-skipped backfill %d: %w", id, err)
	}
	return b, nil
}

// largeBackfill is the slot count above which creation raises work_mem for its transaction.
const largeBackfill = 10000

// insertNewRuns inserts a queued run for every slot whose date has none, with its slot row,
// in one statement: the slots are parallel arrays, unnested, so 100,000 slots cost one round
// trip. It returns the indexes (into slots) of the slots whose date already had a run.
func insertNewRuns(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, slots []PlannedSlot, now time.Time) ([]int, error) {
	n := len(slots)
	ordinals := make(pq.Int64Array, n)
	dates := make(pq.StringArray, n)
	ends := make(pq.StringArray, n)
	runIDs := make(pq.StringArray, n)
	for i, sl := range slots {
		ordinals[i] = int64(sl.SortOrdinal)
		dates[i] = sl.LogicalDate.Format(time.RFC3339Nano)
		ends[i] = sl.IntervalEnd.Format(time.RFC3339Nano)
		runIDs[i] = RunIDFor(RunTypeBackfill, sl.LogicalDate)
	}
	// The final SELECT reads the statement's own results, not a table: it tells which slots
	// got a run without reading dag_runs. In the common case every slot got one, and only the
	// count comes back; otherwise the linked ordinals too.
	var res struct {
		Linked   int           `db:"linked"`
		Ordinals pq.Int64Array `db:"ordinals"`
	}
	err := sqlx.GetContext(ctx, tx, &res, `
		WITH slot AS (
			SELECT * FROM unnest($2::int[], $3::timestamptz[], $4::timestamptz[], $5::text[])
				AS s(sort_ordinal, logical_date, interval_end, run_id)
		), created AS (
			INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
				run_type, backfill_id, backfill_sort_ordinal, conf, attempt, queued_at)
			SELECT $6, run_id, logical_date, logical_date, interval_end, 'queued',
				'backfill', $1, sort_ordinal, $7::jsonb, 1, $8
			FROM slot
			ON CONFLICT (dag_id, logical_date) DO NOTHING
			RETURNING id, backfill_sort_ordinal
		), linked AS (
			INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id)
			SELECT $1, s.sort_ordinal, s.logical_date, c.id
			FROM slot s JOIN created c ON c.backfill_sort_ordinal = s.sort_ordinal
			RETURNING sort_ordinal
		)
		SELECT count(*) AS linked,
			CASE WHEN count(*) < cardinality($2::int[]) THEN array_agg(sort_ordinal) END AS ordinals
		FROM linked`,
		backfillID, ordinals, dates, ends, runIDs, p.DagID, jsonParam(p.DagRunConf), now)
	if err != nil {
		return nil, fmt.Errorf("insert runs and slots: %w", err)
	}
	if res.Linked == n {
		return nil, nil
	}
	got := make([]bool, n)
	for _, ord := range res.Ordinals {
		got[ord-1] = true // ordinals are 1..N in slice order
	}
	var taken []int
	for i := range got {
		if !got[i] {
			taken = append(taken, i)
		}
	}
	return taken, nil
}

// settleTakenSlots decides the slots whose date already had a run, reading only those runs:
// each is reprocessed (the run is taken over) or skipped with a reason. It then writes those
// slots' rows.
func settleTakenSlots(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, slots []PlannedSlot, taken []int, now time.Time) error {
	dates := make(pq.StringArray, len(taken))
	for i, idx := range taken {
		dates[i] = slots[idx].LogicalDate.Format(time.RFC3339Nano)
	}
	var runs []existingRun
	err := sqlx.SelectContext(ctx, tx, &runs, `
		SELECT id, logical_date, state FROM dag_runs WHERE dag_id = $1 AND logical_date = ANY($2::timestamptz[])`,
		p.DagID, dates)
	if err != nil {
		return fmt.Errorf("read existing runs: %w", err)
	}
	byDate := make(map[int64]existingRun, len(runs))
	for _, r := range runs {
		byDate[r.LogicalDate.UnixMicro()] = r
	}
	for _, idx := range taken {
		r, ok := byDate[slots[idx].LogicalDate.UnixMicro()]
		if !ok {
			// A run_id clash without a date clash: only a corrupt history can do that.
			return fmt.Errorf("slot %s conflicted with no run of its date", slots[idx].LogicalDate)
		}
		decide(&slots[idx], p.ReprocessBehavior, r)
	}
	if err := reprocessRuns(ctx, tx, backfillID, p.DagRunConf, slots, now); err != nil {
		return err
	}
	ordinals := make(pq.Int64Array, len(taken))
	runIDs := make(pq.Int64Array, len(taken))
	reasons := make(pq.StringArray, len(taken))
	for i, idx := range taken {
		ordinals[i] = int64(slots[idx].SortOrdinal)
		runIDs[i] = slots[idx].ExistingRunID
		if r := slots[idx].ExceptionReason; r != nil {
			reasons[i] = *r
		}
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id, exception_reason)
		SELECT $1, u.sort_ordinal, u.logical_date, nullif(u.run_id, 0), nullif(u.reason, '')
		FROM unnest($2::int[], $3::timestamptz[], $4::bigint[], $5::text[]) AS u(sort_ordinal, logical_date, run_id, reason)`,
		backfillID, ordinals, dates, runIDs, reasons)
	if err != nil {
		return fmt.Errorf("insert slots of existing runs: %w", err)
	}
	return nil
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
		UPDATE backfill_dag_runs s SET frozen_state = r.state, frozen_attempt = r.attempt, frozen_note = r.note
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

// activeBackfillID looks up the DAG's active backfill, if any.
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

// alreadyRunning answers a request whose DAG has an active backfill: a replay when that
// backfill is the one an earlier request with the same key created (that request may have
// committed just after our first look at the key), 409 otherwise.
func (s *Store) alreadyRunning(ctx context.Context, key string, hash fingerprint, activeID int64) (Backfill, bool, error) {
	if b, ok, err := s.idempotentReplay(ctx, key, hash); err != nil || ok {
		return b, ok, err
	}
	return Backfill{}, false, &BackfillAlreadyRunningError{ActiveBackfillID: activeID}
}

// idempotentReplay answers a request whose key is already stored: the backfill as it is now
// when the request is the same, ErrIdempotencyKeyReused when it differs. The conf is compared
// by PostgreSQL as jsonb values (see requestHash): key order and spacing do not matter, every
// digit of a number does.
func (s *Store) idempotentReplay(ctx context.Context, key string, req fingerprint) (Backfill, bool, error) {
	if key == "" {
		return Backfill{}, false, nil
	}
	var stored struct {
		Same       bool   `db:"same"`
		BackfillID *int64 `db:"backfill_id"`
	}
	err := sqlx.GetContext(ctx, s.db, &stored, `
		SELECT request_hash = $2 AND dag_run_conf IS NOT DISTINCT FROM $3::jsonb AS same, backfill_id
		FROM idempotency_keys WHERE key = $1`, key, req.hash, jsonParam(req.conf))
	if isNoRows(err) {
		return Backfill{}, false, nil
	}
	if err != nil {
		return Backfill{}, false, fmt.Errorf("read idempotency key: %w", err)
	}
	if !stored.Same {
		return Backfill{}, false, ErrIdempotencyKeyReused
	}
	if stored.BackfillID == nil {
		return Backfill{}, false, fmt.Errorf("idempotency key %q has no backfill", key)
	}
	b, err := s.BackfillGet(ctx, *stored.BackfillID)
	if err == nil {
		// The creating commit may still be waiting for its synchronous standby.
		err = s.awaitDurable(ctx)
	}
	return b, err == nil, err
}

package repo

import (
	"context"
	"database/sql"
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
	known, err := s.existingRunDates(ctx, p.DagID, plan)
	if err != nil {
		return Backfill{}, false, err
	}
	// Each pass of this loop follows a concurrent request that changed the ground between our
	// transaction and our look-up (a winner that finished, a key holder that rolled back).
	// That takes a very unlucky interleaving; a few passes are plenty, and the bound keeps a
	// pathological case from spinning.
	for range maxCreatePasses {
		var b Backfill
		err := s.inSerializableTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			b, err = s.backfillInsertAll(ctx, tx, p, hash, dag, plan, known)
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
// plan is mutated as slots are decided) unless the DAG's schedule changed since. known is
// the dates that had a run before the transaction (see insertNewRuns).
func (s *Store) backfillInsertAll(ctx context.Context, tx *sqlx.Tx, p BackfillCreateParams, hash fingerprint, planDag Dag, planned []PlannedSlot, known runDates) (Backfill, error) {
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
	copied := false
	if len(known) == 0 && len(slots) >= copyAbove {
		if copied, err = copyNewRuns(ctx, tx, id, p, slots, now); err != nil {
			return Backfill{}, err
		}
	}
	var taken []int
	if !copied {
		if taken, err = insertNewRuns(ctx, tx, id, p, slots, known, now); err != nil {
			return Backfill{}, err
		}
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
// trip. Slots whose date known says has a run are not tried (a reprocess of 100,000 runs
// would otherwise pay for 100,000 conflicts); the others are inserted blindly, and a run that
// appeared since known was read shows as a conflict. It returns the indexes (into slots) of
// the slots whose date already had a run.
func insertNewRuns(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, slots []PlannedSlot, known runDates, now time.Time) ([]int, error) {
	var try []int
	for i, sl := range slots {
		if !known[sl.LogicalDate.UnixMicro()] {
			try = append(try, i)
		}
	}
	got := make([]bool, len(slots))
	if len(try) > 0 {
		linked, err := insertRunsAndSlots(ctx, tx, backfillID, p, slots, try, now)
		if err != nil {
			return nil, err
		}
		if linked == nil {
			for _, i := range try {
				got[i] = true
			}
		}
		for _, ord := range linked {
			got[ord-1] = true // ordinals are 1..N in slice order
		}
	}
	var taken []int
	for i := range got {
		if !got[i] {
			taken = append(taken, i)
		}
	}
	return taken, nil
}

// insertRunsAndSlots is the statement of insertNewRuns for the slots at indexes try. It
// returns nil when every one got a run, else the ordinals of those that did.
func insertRunsAndSlots(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, slots []PlannedSlot, try []int, now time.Time) (pq.Int64Array, error) {
	n := len(try)
	ordinals := make(pq.Int64Array, n)
	dates := make(pq.StringArray, n)
	ends := make(pq.StringArray, n)
	runIDs := make(pq.StringArray, n)
	for j, i := range try {
		sl := slots[i]
		ordinals[j] = int64(sl.SortOrdinal)
		dates[j] = sl.LogicalDate.Format(time.RFC3339Nano)
		ends[j] = sl.IntervalEnd.Format(time.RFC3339Nano)
		runIDs[j] = RunIDFor(RunTypeBackfill, sl.LogicalDate)
	}
	// The slot rows are made from the run insert's own RETURNING (no join back to the
	// parameters), and the final SELECT reads the statement's own results, not a table: it
	// tells which slots got a run without reading dag_runs. In the common case every slot got
	// one, and only the count comes back; otherwise the linked ordinals too.
	var res struct {
		Linked   int           `db:"linked"`
		Ordinals pq.Int64Array `db:"ordinals"`
	}
	err := sqlx.GetContext(ctx, tx, &res, `
		WITH created AS (
			INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
				run_type, backfill_id, backfill_sort_ordinal, conf, attempt, queued_at)
			SELECT $6, s.run_id, s.logical_date, s.logical_date, s.interval_end, 'queued',
				'backfill', $1, s.sort_ordinal, $7::jsonb, 1, $8
			FROM unnest($2::int[], $3::timestamptz[], $4::timestamptz[], $5::text[])
				AS s(sort_ordinal, logical_date, interval_end, run_id)
			ON CONFLICT (dag_id, logical_date) DO NOTHING
			RETURNING id, backfill_sort_ordinal, logical_date
		), linked AS (
			INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id)
			SELECT $1, backfill_sort_ordinal, logical_date, id FROM created
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
	if res.Ordinals == nil {
		res.Ordinals = pq.Int64Array{} // none linked: not nil, which means all
	}
	return res.Ordinals, nil
}

// runDates is a set of logical dates (Unix microseconds) that have a run.
type runDates map[int64]bool

// existingRunDates reads which dates of the plan's window already have a run of the DAG. It
// runs before the creating transaction, on purpose: under SERIALIZABLE a read of the DAG's
// key range would take predicate locks that make creations for neighbouring DAGs abort each
// other. It is only a hint (see insertNewRuns); a range scan of one index, it costs little
// when the window is empty, the common case.
func (s *Store) existingRunDates(ctx context.Context, dagID string, plan []PlannedSlot) (runDates, error) {
	first, last := windowOf(plan)
	var dates []time.Time
	err := sqlx.SelectContext(ctx, s.db, &dates, `
		SELECT logical_date FROM dag_runs WHERE dag_id = $1 AND logical_date BETWEEN $2 AND $3`, dagID, first, last)
	if err != nil {
		return nil, fmt.Errorf("read existing runs of %q: %w", dagID, err)
	}
	known := make(runDates, len(dates))
	for _, d := range dates {
		known[d.UnixMicro()] = true
	}
	return known, nil
}

// windowOf is the first and last logical date of slots, in either order of the plan.
func windowOf(slots []PlannedSlot) (time.Time, time.Time) {
	first, last := slots[0].LogicalDate, slots[len(slots)-1].LogicalDate
	if first.After(last) {
		first, last = last, first
	}
	return first, last
}

// takenRun is a run that exists for a slot's date, with where it sits in the backfill that
// owns it (if any), so that the takeover can freeze that backfill's slot by primary key.
type takenRun struct {
	existingRun
	BackfillID  *int64  `db:"backfill_id"`
	SortOrdinal *int64  `db:"backfill_sort_ordinal"`
	Attempt     int     `db:"attempt"`
	Note        *string `db:"note"`
}

// settleTakenSlots decides the slots whose date already had a run, reading those runs in one
// range scan of the window they span: each is reprocessed (the run is taken over) or skipped
// with a reason. It then writes those slots' rows.
func settleTakenSlots(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, slots []PlannedSlot, taken []int, now time.Time) error {
	takenSlots := make([]PlannedSlot, len(taken))
	for i, idx := range taken {
		takenSlots[i] = slots[idx]
	}
	first, last := windowOf(takenSlots)
	var runs []takenRun
	err := sqlx.SelectContext(ctx, tx, &runs, `
		SELECT id, logical_date, state, backfill_id, backfill_sort_ordinal, attempt, note FROM dag_runs
		WHERE dag_id = $1 AND logical_date BETWEEN $2 AND $3`, p.DagID, first, last)
	if err != nil {
		return fmt.Errorf("read existing runs: %w", err)
	}
	byDate := make(map[int64]takenRun, len(runs))
	for _, r := range runs {
		byDate[r.LogicalDate.UnixMicro()] = r
	}
	var over []takeover
	for _, idx := range taken {
		r, ok := byDate[slots[idx].LogicalDate.UnixMicro()]
		if !ok {
			// A run_id clash without a date clash: only a corrupt history can do that.
			return fmt.Errorf("slot %s conflicted with no run of its date", slots[idx].LogicalDate)
		}
		decide(&slots[idx], p.ReprocessBehavior, r.existingRun)
		if slots[idx].Action == ActionReprocess {
			over = append(over, takeover{run: r, ordinal: slots[idx].SortOrdinal})
		}
	}
	if err := reprocessRuns(ctx, tx, backfillID, p, over, now); err != nil {
		return err
	}
	ordinals := make(pq.Int64Array, len(taken))
	dates := make(pq.StringArray, len(taken))
	runIDs := make(pq.Int64Array, len(taken))
	reasons := make(pq.StringArray, len(taken))
	for i, idx := range taken {
		ordinals[i] = int64(slots[idx].SortOrdinal)
		dates[i] = slots[idx].LogicalDate.Format(time.RFC3339Nano)
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

// takeover is a run a slot of the new backfill reprocesses, and that slot's ordinal.
type takeover struct {
	run     takenRun
	ordinal int
}

// reprocessRuns takes the runs over: it first freezes their state in the slot listing of the
// (terminal) backfill that owned them, by that slot's primary key, then clears them back to
// queued. The state frozen is the one read in this transaction; the takeover below proves it
// still held (a run that changed fails the count and the transaction is tried again).
//
// Both statements bound what they read by a range of an index (the owners' slots between
// the lowest and highest ordinal taken; the DAG's runs between the first and last date
// taken) besides the join on the arrays: with the join alone, the planner hashed the whole
// table when the arrays were a few percent of it (a 10,000-run reprocess read every one of
// 825,000 runs), a cost that grew with history instead of with the runs taken over.
func reprocessRuns(ctx context.Context, tx *sqlx.Tx, backfillID int64, p BackfillCreateParams, over []takeover, now time.Time) error {
	if len(over) == 0 {
		return nil
	}
	ids := make(pq.Int64Array, 0, len(over))
	ordinals := make(pq.Int64Array, 0, len(over))
	var owners, ownerOrdinals, owned, attempts pq.Int64Array
	var states pq.StringArray
	var notes []sql.NullString
	first, last := over[0].run.LogicalDate, over[0].run.LogicalDate
	var lowOrd, highOrd int64
	for _, t := range over {
		ids = append(ids, t.run.ID)
		ordinals = append(ordinals, int64(t.ordinal))
		if t.run.LogicalDate.Before(first) {
			first = t.run.LogicalDate
		}
		if t.run.LogicalDate.After(last) {
			last = t.run.LogicalDate
		}
		if t.run.BackfillID != nil && t.run.SortOrdinal != nil {
			ord := *t.run.SortOrdinal
			if len(owners) == 0 || ord < lowOrd {
				lowOrd = ord
			}
			if len(owners) == 0 || ord > highOrd {
				highOrd = ord
			}
			owners = append(owners, *t.run.BackfillID)
			ownerOrdinals = append(ownerOrdinals, ord)
			owned = append(owned, t.run.ID)
			states = append(states, t.run.State)
			attempts = append(attempts, int64(t.run.Attempt))
			if t.run.Note != nil {
				notes = append(notes, sql.NullString{String: *t.run.Note, Valid: true})
			} else {
				notes = append(notes, sql.NullString{})
			}
		}
	}
	if len(owners) > 0 {
		_, err := tx.ExecContext(ctx, `
			UPDATE backfill_dag_runs s SET frozen_state = u.state, frozen_attempt = u.attempt, frozen_note = u.note
			FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[], $7::int[], $8::text[])
				AS u(backfill_id, sort_ordinal, run_id, state, attempt, note)
			WHERE s.backfill_id = u.backfill_id AND s.sort_ordinal = u.sort_ordinal AND s.dag_run_id = u.run_id
			  AND s.frozen_state IS NULL
			  AND s.backfill_id = ANY(ARRAY(SELECT DISTINCT unnest($1::bigint[]))) AND s.sort_ordinal BETWEEN $5 AND $6`,
			owners, ownerOrdinals, owned, states, lowOrd, highOrd, attempts, pq.Array(notes))
		if err != nil {
			return fmt.Errorf("freeze taken-over slots: %w", err)
		}
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE dag_runs r SET state = 'queued', backfill_id = $3, backfill_sort_ordinal = u.ordinal,
			attempt = 1, conf = coalesce($4::jsonb, r.conf), worker_id = NULL, queued_at = $5,
			start_date = NULL, end_date = NULL, lease_expires_at = NULL, lease_seconds = NULL
		FROM unnest($1::bigint[], $2::int[]) AS u(id, ordinal)
		WHERE r.id = u.id AND r.state IN ('success', 'failed', 'canceled')
		  AND r.dag_id = $6 AND r.logical_date BETWEEN $7 AND $8`,
		ids, ordinals, backfillID, jsonParam(p.DagRunConf), now, p.DagID, first, last)
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

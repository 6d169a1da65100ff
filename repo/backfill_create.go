package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// BackfillCreate creates a backfill, its slots and its runs in one SERIALIZABLE transaction.
// It reports replayed = true when an earlier request with the same idempotency key created it.
func (s *Store) BackfillCreate(ctx context.Context, p domain.BackfillRequest) (Backfill, bool, error) {
	defer s.eventsMayBeWritten()
	hash, err := domain.RequestHash(p)
	if err != nil {
		return Backfill{}, false, err
	}
	// Replays are the common case for a retried request: answer them without planning.
	replay, replayed, err := s.idempotentReplay(ctx, p.IdempotencyKey, hash)
	if err != nil || replayed {
		return replay, replayed, err
	}
	// Answer what is wrong with the request itself (404, 422) before what is in its way
	// (409); then, as a fast path, refuse a DAG that has an active backfill before any
	// work. That read decides nothing by itself: inside the transaction the unique index is
	// the arbiter.
	dag, now, err := s.dagAndNow(ctx, p.DagID)
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
	activeID, active, err := readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) (int64, bool, error) {
		return activeBackfillID(ctx, q, p.DagID)
	})
	if err != nil {
		return Backfill{}, false, err
	}
	if active {
		return s.alreadyRunning(ctx, p.IdempotencyKey, hash, activeID)
	}
	// Each pass of this loop follows a concurrent request that changed the ground between our
	// transaction and our look-up (a winner that finished, a key holder that rolled back).
	// That takes a very unlucky interleaving; a few passes are plenty, and the bound keeps a
	// pathological case from spinning.
	for range maxCreatePasses {
		var b Backfill
		err := s.withRetry(ctx, func(a attempt) error {
			// Every attempt looks at the window afresh: dates read once and reused would
			// go stale when a concurrent creation commits the same dates, or when the DAG is
			// deleted (its runs with it) and created again.
			known, err := s.existingRunDates(a.ctx, a.db, p.DagID, plan)
			if err != nil {
				return err
			}
			return s.runTx(ctx, sql.LevelSerializable, a, func(tx *sqlx.Tx) error {
				var err error
				b, _, err = s.backfillInsertAll(ctx, tx, p, hash, dag, plan, known)
				return err
			})
		})
		switch {
		case err == nil:
			s.observer.BackfillCreated(string(b.State))
			return b, false, nil
		case errors.Is(err, errIdempotencyKeyTaken):
			// A concurrent request with this key committed first.
			b, ok, err := s.idempotentReplay(ctx, p.IdempotencyKey, hash)
			if err == nil && !ok {
				continue // it rolled back after all: try again
			}
			return b, ok, err
		case errors.Is(err, errBackfillUniqueViolation):
			id, found, lerr := readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) (int64, bool, error) {
				return activeBackfillID(ctx, q, p.DagID)
			})
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
// the dates that had a run just before this attempt's transaction began (see insertNewRuns):
// a hint, read outside the SERIALIZABLE snapshot so that it takes no predicate locks. Where
// it disagrees with the snapshot (a run committed or deleted in between), or where a
// concurrent creation inserts the same run first, the attempt fails with
// errConcurrentRunForDate and is run again from a fresh look, which then sees the winner.
//
// It answers the backfill and its slots as settled (each slot's action decided).
func (s *Store) backfillInsertAll(ctx context.Context, tx *sqlx.Tx, p domain.BackfillRequest, hash domain.Fingerprint, planDag Dag, planned []domain.PlannedSlot, known runDates) (Backfill, []domain.PlannedSlot, error) {
	// The transaction's own "now" (backfill_now() is now(), the transaction's start), read
	// once: it stamps every row this transaction writes.
	now, err := dbNow(ctx, tx)
	if err != nil {
		return Backfill{}, nil, err
	}
	dag, err := dagGet(ctx, tx, p.DagID, "")
	if err != nil {
		return Backfill{}, nil, err
	}
	slots := slices.Clone(planned)
	if dag.Schedule != planDag.Schedule || dag.Timezone != planDag.Timezone {
		if slots, err = s.planSlots(dag, p, now); err != nil {
			return Backfill{}, nil, err
		}
	}
	if len(slots) == 0 {
		return Backfill{}, nil, fmt.Errorf("%w: no schedule tick in the window has ended", ErrNoRunsToCreate)
	}
	// A creation is one large statement planned once: JIT compiling it costs more (about
	// 140 ms at 100,000 slots) than it saves.
	if _, err := tx.ExecContext(ctx, `SET LOCAL jit = off`); err != nil {
		return Backfill{}, nil, fmt.Errorf("set jit: %w", err)
	}
	var id int64
	if err := sqlx.GetContext(ctx, tx, &id, `SELECT nextval(pg_get_serial_sequence('backfills', 'id'))`); err != nil {
		return Backfill{}, nil, fmt.Errorf("allocate backfill id: %w", err)
	}
	if p.IdempotencyKey != "" {
		// Recorded before the runs: a concurrent request with the same key waits here for
		// this one's outcome instead of planning and inserting its runs in vain.
		r := idemRequest{key: p.IdempotencyKey, op: opBackfill, fp: hash}
		if err := idemRecord(ctx, tx, r, []int64{id}, &p.DagID); err != nil {
			return Backfill{}, nil, err
		}
	}
	if len(slots) > largeBackfill {
		// The slot insert hashes and sorts every slot; let it do so in memory.
		if _, err := tx.ExecContext(ctx, `SET LOCAL work_mem = '64MB'`); err != nil {
			return Backfill{}, nil, fmt.Errorf("set work_mem: %w", err)
		}
	}
	copied := false
	if len(known) == 0 && len(slots) >= copyAbove {
		if copied, err = copyNewRuns(ctx, tx, id, p, slots, now); err != nil {
			return Backfill{}, nil, err
		}
	}
	var taken []int
	if !copied {
		if taken, err = insertNewRuns(ctx, tx, id, p, slots, known, now); err != nil {
			return Backfill{}, nil, err
		}
	}
	if len(taken) > 0 {
		if err := settleTakenSlots(ctx, tx, id, p, slots, taken, now); err != nil {
			return Backfill{}, nil, err
		}
	}
	// The slots are settled: this is the plan the backfill is created from.
	planHash, err := domain.CheckPlan(dag.Schedule, dag.Timezone, slots, p.IfMatch)
	if err != nil {
		return Backfill{}, nil, err
	}
	var queued, skipped, blocked int
	for _, sl := range slots {
		switch {
		case sl.Action == domain.ActionSkip:
			skipped++
		case sl.BlockedBy > 0:
			queued++
			blocked++
		default:
			queued++
		}
	}
	var b Backfill
	err = sqlx.GetContext(ctx, tx, &b, `
		INSERT INTO backfills (id, dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
			max_active_runs, description, state, created_at, updated_at, num_queued, num_skipped,
			max_failed_runs, plan_hash, parent_backfill_id, pool, code_ref, created_by, reason, priority,
			group_id, group_depth, num_blocked)
		OVERRIDING SYSTEM VALUE
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'running', $10, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
			$21, CASE WHEN $21::bigint IS NOT NULL THEN $22::smallint END, $23)
		RETURNING `+backfillColumns,
		id, p.DagID, p.FromDate, p.ToDate, p.RunBackwards, JSON(p.DagRunConf), p.ReprocessBehavior,
		p.MaxActiveRuns, p.Description, now, queued, skipped, p.MaxFailedRuns, planHash, p.ParentBackfillID, p.Pool,
		p.CodeRef, p.CreatedBy, p.Reason, p.Priority, p.GroupID, p.GroupDepth, blocked)
	if uniqueViolation(err) == constraintOneActivePerDag {
		return Backfill{}, nil, errBackfillUniqueViolation
	}
	if errors.Is(poolMissing(err), ErrUnknownPool) {
		return Backfill{}, nil, fmt.Errorf("%w: %s", ErrUnknownPool, *p.Pool)
	}
	if err != nil {
		return Backfill{}, nil, fmt.Errorf("insert backfill: %w", err)
	}
	if queued > 0 {
		return b, slots, nil
	}
	// Every slot was skipped: nothing to wait for, so the backfill is born succeeded, once
	// its insert as 'running' has proven that no other backfill of the DAG is active. The
	// setting tells the event writer (migrations/00011) that the insert and this update are
	// one birth: backfill.created and backfill.succeeded, both with the final row.
	if _, err := tx.ExecContext(ctx, `SELECT set_config('backfill.born_terminal', $1, true)`, strconv.FormatInt(id, 10)); err != nil {
		return Backfill{}, nil, fmt.Errorf("mark all-skipped backfill %d: %w", id, err)
	}
	err = sqlx.GetContext(ctx, tx, &b, `
		UPDATE backfills SET state = 'succeeded', completed_at = $2 WHERE id = $1
		RETURNING `+backfillColumns, id, now)
	if err != nil {
		return Backfill{}, nil, fmt.Errorf("finish all-skipped backfill %d: %w", id, err)
	}
	return b, slots, nil
}

// takenRun is a run that exists for a slot's date, with the backfill that owns it (if any)
// and what that backfill's record shows of it, which the takeover keeps on the new slot.
type takenRun struct {
	existingRun
	BackfillID *int64
	Attempt    int
	Note       *string
}

// settleTakenSlots decides the slots whose date already had a run, reading those runs in one
// range scan of the window they span: each is reprocessed (the run is taken over) or skipped
// with a reason. It then writes those slots' rows; a reprocessed slot's row records the
// backfill it took the run from and the state, attempt and note the run had there, which is
// what that backfill's record goes on showing (the view backfill_slot_records).
func settleTakenSlots(ctx context.Context, tx *sqlx.Tx, backfillID int64, p domain.BackfillRequest, slots []domain.PlannedSlot, taken []int, now time.Time) error {
	takenSlots := make([]domain.PlannedSlot, len(taken))
	for i, idx := range taken {
		takenSlots[i] = slots[idx]
	}
	first, last := domain.Window(takenSlots)
	runs, byDate, err := readTakenRuns(ctx, tx, p.DagID, first, last, len(taken))
	if err != nil {
		return err
	}
	over := make([]takeover, 0, len(taken))
	priors := make([]*takenRun, len(taken))
	for i, idx := range taken {
		at, ok := byDate[slots[idx].LogicalDate.UnixMicro()]
		if !ok {
			// The date had a run when known was read and has none in this snapshot: the
			// run was deleted in between (its DAG deleted and created again). Decide again
			// from a fresh look.
			return fmt.Errorf("%w: slot %s has no run of its date", errConcurrentRunForDate, slots[idx].LogicalDate)
		}
		r := &runs[at]
		domain.Decide(&slots[idx], p.ReprocessBehavior, r.ID, r.State)
		if slots[idx].Action == domain.ActionReprocess {
			over = append(over, takeover{id: r.ID, logicalDate: r.LogicalDate, ordinal: slots[idx].SortOrdinal, blocked: slots[idx].BlockedBy})
			if r.BackfillID != nil {
				priors[i] = r
			}
		}
	}
	if err := reprocessRuns(ctx, tx, backfillID, p, over, now); err != nil {
		return err
	}
	// Streamed with COPY: for 100,000 taken slots an INSERT over nine unnested arrays took
	// 0.8 s (building and parsing the arrays) where COPY takes 0.45 s. The rows cannot
	// conflict: their key starts with the backfill's new id.
	row := make([]any, 0, 9)
	err = copyIn(ctx, tx, `COPY backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id,
		exception_reason, prior_backfill_id, prior_state, prior_attempt, prior_note) FROM STDIN`, len(taken),
		func(i int) []any {
			sl := slots[taken[i]]
			// One row buffer for all: each Exec converts its arguments before it returns.
			row = append(row[:0], backfillID, sl.SortOrdinal, sl.LogicalDate, nil, nil, nil, nil, nil, nil)
			if sl.ExistingRunID != 0 {
				row[3] = sl.ExistingRunID
			}
			if sl.ExceptionReason != nil {
				row[4] = *sl.ExceptionReason
			}
			if prior := priors[i]; prior != nil {
				row[5], row[6], row[7] = *prior.BackfillID, string(prior.State), prior.Attempt
				if prior.Note != nil {
					row[8] = *prior.Note
				}
			}
			return row
		})
	if err != nil {
		return fmt.Errorf("copy slots of existing runs: %w", err)
	}
	return nil
}

// takeover is a run a slot of the new backfill reprocesses, that slot's ordinal, and how many
// runs it waits for (a group member's).
type takeover struct {
	id          int64
	logicalDate time.Time
	ordinal     int
	blocked     int
}

// readTakenRuns reads the DAG's runs from first to last (one range scan of the date index),
// indexed by logical date (Unix microseconds). It scans by hand: at 100,000 runs sqlx's
// reflection was a third of the Go time of a reprocess.
func readTakenRuns(ctx context.Context, tx *sqlx.Tx, dagID string, first, last time.Time, expect int) ([]takenRun, map[int64]int, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT id, logical_date, state, backfill_id, attempt, note FROM dag_runs
		WHERE dag_id = $1 AND logical_date BETWEEN $2 AND $3`, dagID, first, last)
	if err != nil {
		return nil, nil, fmt.Errorf("read existing runs: %w", err)
	}
	defer rows.Close()
	runs := make([]takenRun, 0, expect)
	byDate := make(map[int64]int, expect)
	for rows.Next() {
		var r takenRun
		if err := rows.Scan(&r.ID, &r.LogicalDate, &r.State, &r.BackfillID, &r.Attempt, &r.Note); err != nil {
			return nil, nil, fmt.Errorf("read existing runs: %w", err)
		}
		byDate[r.LogicalDate.UnixMicro()] = len(runs)
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read existing runs: %w", err)
	}
	return runs, byDate, nil
}

// reprocessRuns takes the runs over: it clears them back to queued, owned by the new
// backfill, at the attempt after their last (so a program can tell the slot ran before; the
// go starts there, which is what MAX_ATTEMPTS counts from: see SweepExpireLeases). The state the new slot records of each run is the one read in this transaction;
// the update proves it still held (a run that changed fails the count and the transaction is
// tried again).
//
// The update bounds what it reads by a range of an index (the DAG's runs between the first
// and last date taken) besides the join on the arrays: with the join alone, the planner
// hashed the whole table when the arrays were a few percent of it (a 10,000-run reprocess
// read every one of 825,000 runs), a cost that grew with history instead of with the runs
// taken over.
func reprocessRuns(ctx context.Context, tx *sqlx.Tx, backfillID int64, p domain.BackfillRequest, over []takeover, now time.Time) error {
	if len(over) == 0 {
		return nil
	}
	ids := make(pq.Int64Array, 0, len(over))
	ordinals := make(pq.Int64Array, 0, len(over))
	blocked := make(pq.Int64Array, 0, len(over))
	first, last := over[0].logicalDate, over[0].logicalDate
	for _, t := range over {
		ids = append(ids, t.id)
		ordinals = append(ordinals, int64(t.ordinal))
		blocked = append(blocked, int64(t.blocked))
		if t.logicalDate.Before(first) {
			first = t.logicalDate
		}
		if t.logicalDate.After(last) {
			last = t.logicalDate
		}
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE dag_runs r SET state = 'queued', backfill_id = $3, backfill_sort_ordinal = u.ordinal,
			attempt = r.attempt + 1, first_attempt = r.attempt + 1, conf = coalesce($4::jsonb, r.conf), worker_id = NULL, queued_at = $5,
			start_date = NULL, end_date = NULL, lease_expires_at = NULL, lease_seconds = NULL, blocked_by = u.blocked
		FROM unnest($1::bigint[], $2::int[], $9::int[]) AS u(id, ordinal, blocked)
		WHERE r.id = u.id AND r.state IN ('success', 'failed', 'canceled')
		  AND r.dag_id = $6 AND r.logical_date BETWEEN $7 AND $8`,
		ids, ordinals, backfillID, JSON(p.DagRunConf), now, p.DagID, first, last, blocked)
	if err != nil {
		return fmt.Errorf("reprocess runs: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		// A run left its terminal state after we read it: decide again from a fresh snapshot.
		return fmt.Errorf("%w: %d of %d runs reprocessed (%v)", errConcurrentRunForDate, n, len(ids), err)
	}
	// A run taken over leaves the dependencies of the group it ran in, both ways: a success
	// of it now must not unblock the old group's runs, nor may it wait for the old group's.
	_, err = tx.ExecContext(ctx, `
		WITH waited AS (DELETE FROM dag_run_dependencies WHERE run_id = ANY ($1))
		DELETE FROM dag_run_dependencies WHERE upstream_run_id = ANY ($1)`, ids)
	if err != nil {
		return fmt.Errorf("drop the old dependencies of reprocessed runs: %w", err)
	}
	return nil
}

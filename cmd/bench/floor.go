package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The floor works on a database migrated with the service's own migrations, so its tables
// have exactly the service's columns, indexes, keys, constraints and counter trigger. It
// talks to PostgreSQL through the driver the service uses (lib/pq, database/sql).

// window is the work of one backfill creation: n minutely slots ending at to.
type window struct {
	dagID string
	n     int
	to    time.Time
}

// windowEnd is the last slot of every window: far enough in the past that every interval
// has ended, minute-aligned so that `* * * * *` ticks on it.
var windowEnd = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func newWindow(dagID string, n int) window { return window{dagID: dagID, n: n, to: windowEnd} }

func (w window) from() time.Time          { return w.to.Add(-time.Duration(w.n-1) * time.Minute) }
func (w window) slot(i int) time.Time     { return w.from().Add(time.Duration(i) * time.Minute) }
func (w window) runID(t time.Time) string { return "backfill__" + t.Format(time.RFC3339) }

// floorDag inserts the DAG a floor backfill belongs to (the backfill's foreign key needs it).
func floorDag(ctx context.Context, db *sql.DB, dagID string) error {
	_, err := db.ExecContext(ctx, `
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ($1, '* * * * *', 'UTC', 16, false, now(), now())`, dagID)
	if err != nil {
		return fmt.Errorf("floor dag %s: %w", dagID, err)
	}
	return nil
}

// insertTriggerCounts reports whether the schema counts a backfill's runs by a trigger on
// INSERT into dag_runs; otherwise creation writes the counters on the backfill row itself,
// and so does the floor. (The schema has had it both ways; the floor follows either.) The
// insert triggers that count a DAG's runs outside backfills (migration 00005) and a pool's
// manual runs (00013) are not one.
func insertTriggerCounts(ctx context.Context, db *sql.DB) (bool, error) {
	var ok bool
	err := db.QueryRowContext(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_trigger
		               WHERE tgrelid = 'dag_runs'::regclass AND NOT tgisinternal AND tgtype & 4 <> 0
		                 AND tgname NOT IN ('dag_runs_manual_counts_insert', 'dag_runs_pool_counts_insert'))`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for an insert trigger on dag_runs: %w", err)
	}
	return ok, nil
}

const (
	backfillCols = `dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
		max_active_runs, description, state, created_at, updated_at, num_queued`
	runCols = `dag_id, run_id, logical_date, data_interval_start, data_interval_end, state, run_type,
		backfill_id, backfill_sort_ordinal, conf, attempt, queued_at`
	slotCols = `backfill_id, sort_ordinal, logical_date, dag_run_id`
)

// The rows the service writes for a window, column for column. The backfill row carries its
// count of queued runs unless a trigger counts them.
func (w window) backfillRow(maxActive int, now time.Time, triggerCounts bool) []any {
	queued := w.n
	if triggerCounts {
		queued = 0
	}
	return []any{w.dagID, w.from(), w.to, false, nil, "none", maxActive, nil, "running", now, now, queued}
}

func (w window) runRow(i int, backfillID int64, now time.Time) []any {
	t := w.slot(i)
	return []any{w.dagID, w.runID(t), t, t, t.Add(time.Minute), "queued", "backfill", backfillID, i + 1, nil, 1, now}
}

// copyCreate is the floor of P1: the backfill row, then its runs, then its slots, each with
// COPY, in one transaction at PostgreSQL's default isolation. The ids are reserved up front
// from the tables' own identity sequences (one round trip), so that the slots can name their
// runs without reading anything back.
func copyCreate(ctx context.Context, db *sql.DB, w window, maxActive int, triggerCounts bool) (int64, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var backfillID, lastRun int64
	err = tx.QueryRowContext(ctx, `
		SELECT nextval(pg_get_serial_sequence('backfills', 'id')),
		       setval(pg_get_serial_sequence('dag_runs', 'id'), nextval(pg_get_serial_sequence('dag_runs', 'id')) + $1 - 1)`,
		w.n).Scan(&backfillID, &lastRun)
	if err != nil {
		return 0, fmt.Errorf("reserve ids: %w", err)
	}
	firstRun := lastRun - int64(w.n) + 1
	err = copyRows(ctx, tx, `COPY backfills (id, `+backfillCols+`) FROM STDIN`, 1, func(int) []any {
		return append([]any{backfillID}, w.backfillRow(maxActive, now, triggerCounts)...)
	})
	if err != nil {
		return 0, err
	}
	err = copyRows(ctx, tx, `COPY dag_runs (id, `+runCols+`) FROM STDIN`, w.n, func(i int) []any {
		return append([]any{firstRun + int64(i)}, w.runRow(i, backfillID, now)...)
	})
	if err != nil {
		return 0, err
	}
	err = copyRows(ctx, tx, `COPY backfill_dag_runs (`+slotCols+`) FROM STDIN`, w.n, func(i int) []any {
		return []any{backfillID, i + 1, w.slot(i), firstRun + int64(i)}
	})
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return backfillID, nil
}

// copyRows streams n rows through one COPY ... FROM STDIN (lib/pq's COPY support through a
// prepared statement: each Exec buffers a row, the Exec without arguments ends the COPY).
func copyRows(ctx context.Context, tx *sql.Tx, query string, n int, row func(i int) []any) error {
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	defer stmt.Close()
	for i := range n {
		if _, err := stmt.ExecContext(ctx, row(i)...); err != nil {
			return fmt.Errorf("%s: row %d: %w", query, i, err)
		}
	}
	// lib/pq reports errors of the COPY itself (a constraint, a key) here.
	if _, err := stmt.ExecContext(ctx); err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	return nil
}

// rowByRowCreate is the baseline of P1, what Airflow does: one INSERT per run and one per
// slot, in one transaction. The statements are prepared once, so each row costs one round
// trip: a faster baseline than Airflow's ORM (about ten round trips per slot), which makes
// the "20× faster" target harder, not easier.
func rowByRowCreate(ctx context.Context, db *sql.DB, w window, maxActive int, triggerCounts bool) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var backfillID int64
	err = tx.QueryRowContext(ctx, `INSERT INTO backfills (`+backfillCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id`,
		w.backfillRow(maxActive, now, triggerCounts)...).Scan(&backfillID)
	if err != nil {
		return fmt.Errorf("insert backfill: %w", err)
	}
	insRun, err := tx.PrepareContext(ctx, `INSERT INTO dag_runs (`+runCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id`)
	if err != nil {
		return err
	}
	defer insRun.Close()
	insSlot, err := tx.PrepareContext(ctx, `INSERT INTO backfill_dag_runs (`+slotCols+`) VALUES ($1, $2, $3, $4)`)
	if err != nil {
		return err
	}
	defer insSlot.Close()
	for i := range w.n {
		var runID int64
		if err := insRun.QueryRowContext(ctx, w.runRow(i, backfillID, now)...).Scan(&runID); err != nil {
			return fmt.Errorf("insert run %d: %w", i, err)
		}
		if _, err := insSlot.ExecContext(ctx, backfillID, i+1, w.slot(i), runID); err != nil {
			return fmt.Errorf("insert slot %d: %w", i, err)
		}
	}
	return tx.Commit()
}

// floorClaimer is the floor of P4: the minimal claim (one UPDATE around a FOR UPDATE SKIP
// LOCKED pick of the first queued run of the backfill in claim order, on the same partial
// index the service walks) and a guarded success update, each its own statement. Both are
// prepared: this is the least the driver can do per cycle.
type floorClaimer struct {
	claim, report *sql.Stmt
	backfillID    int64
}

// floorClaimSQL claims the first queued run of backfill $2 in claim order for worker $1. It
// names blocked_by = 0 as the service's claim does: the index of a backfill's unfinished runs
// leads with it (migrations/00035), and without it the floor sorted every queued run.
const floorClaimSQL = `
	UPDATE dag_runs SET state = 'running', worker_id = $1, start_date = now(), lease_seconds = 300,
		lease_expires_at = now() + interval '300 seconds'
	WHERE id = (
		SELECT id FROM dag_runs
		WHERE backfill_id = $2 AND blocked_by = 0 AND state = 'queued'
		ORDER BY backfill_sort_ordinal
		FOR UPDATE SKIP LOCKED LIMIT 1)
	RETURNING id`

// floorReportSQL reports run $1 successful if worker $2 still holds it.
const floorReportSQL = `
	UPDATE dag_runs SET state = 'success', end_date = now(), lease_expires_at = NULL
	WHERE id = $1 AND state = 'running' AND worker_id = $2`

func newFloorClaimer(ctx context.Context, db *sql.DB, backfillID int64) (*floorClaimer, error) {
	claim, err := db.PrepareContext(ctx, floorClaimSQL)
	if err != nil {
		return nil, err
	}
	report, err := db.PrepareContext(ctx, floorReportSQL)
	if err != nil {
		claim.Close()
		return nil, err
	}
	return &floorClaimer{claim: claim, report: report, backfillID: backfillID}, nil
}

// cycle claims one run for worker and reports it successful.
func (f *floorClaimer) cycle(ctx context.Context, worker string) error {
	var id int64
	if err := f.claim.QueryRowContext(ctx, worker, f.backfillID).Scan(&id); err != nil {
		return fmt.Errorf("floor claim: %w", err)
	}
	res, err := f.report.ExecContext(ctx, id, worker)
	if err != nil {
		return fmt.Errorf("floor report: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("floor report of run %d changed %d rows", id, n)
	}
	return nil
}

func (f *floorClaimer) Close() error {
	f.claim.Close()
	return f.report.Close()
}

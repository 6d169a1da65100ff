package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/sweeper"
)

// sweepResult is P3: the duration of whole sweep passes at two sizes of history.
type sweepResult struct {
	active                     int
	smallHistory, largeHistory int
	small, large               []time.Duration
}

// runsPerHistoryBackfill sizes the finished backfills of the history: 1M runs are then
// 10,000 terminal backfills, so history grows both tables the sweep could stumble on.
const runsPerHistoryBackfill = 100

// scenarioSweep is P3. It runs the service's own sweeper (sweeper.New over repo.New, the
// code the service runs every SWEEP_INTERVAL) in-process against its own scratch database:
// a number of active backfills, each with three queued runs and one running run whose lease
// is far from expiring (so no pass finishes or changes anything), first with a small history
// of finished backfills, then with a large one. The data is written with INSERT ... SELECT
// through the real tables, so the counter trigger and every constraint hold as in production.
func (b *bench) scenarioSweep(ctx context.Context, dsn string) (sweepResult, error) {
	res := sweepResult{active: b.cfg.activeFills, smallHistory: b.cfg.historySmall, largeHistory: b.cfg.historyLarge}
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return res, err
	}
	defer db.Close()
	db.SetMaxOpenConns(4)

	if err := seedActive(ctx, db, res.active); err != nil {
		return res, err
	}
	sw := sweeper.New(repo.New(db, repo.Config{}), sweeper.Config{Interval: time.Hour})
	done := 0
	for _, p := range []struct {
		history int
		dst     *[]time.Duration
	}{{res.smallHistory, &res.small}, {res.largeHistory, &res.large}} {
		start := time.Now()
		if err := seedHistory(ctx, db, done, p.history); err != nil {
			return res, err
		}
		done = p.history
		// History is old data: by the time a sweep meets it, autovacuum has analyzed it and
		// set its visibility map. Do that now rather than measure autovacuum's timing.
		if _, err := db.ExecContext(ctx, `VACUUM ANALYZE`); err != nil {
			return res, fmt.Errorf("vacuum: %w", err)
		}
		b.log.Printf("P3 history of %d finished runs written in %v", p.history, time.Since(start).Round(time.Millisecond))
		if *p.dst, err = sweepPasses(ctx, sw, 5, b.cfg.sweepPasses); err != nil {
			return res, err
		}
		b.log.Printf("P3 %d active, %d finished runs: median pass %v", res.active, p.history, median(*p.dst).Round(time.Microsecond))
	}
	var active int
	if err := db.GetContext(ctx, &active, `SELECT count(*) FROM backfills WHERE state IN ('running', 'paused', 'canceling')`); err != nil {
		return res, err
	}
	if active != res.active {
		return res, fmt.Errorf("%d backfills still active after the passes, want %d: a pass did work and the timings mean nothing", active, res.active)
	}
	return res, nil
}

func sweepPasses(ctx context.Context, sw *sweeper.Sweeper, warm, n int) ([]time.Duration, error) {
	var ds []time.Duration
	for i := range warm + n {
		start := time.Now()
		if err := sw.RunOnce(ctx); err != nil {
			return nil, fmt.Errorf("sweep pass: %w", err)
		}
		if i >= warm {
			ds = append(ds, time.Since(start))
		}
	}
	return ds, nil
}

// seedActive writes n active backfills (one per DAG, as the unique index demands), each with
// three queued runs and one running run leased for a day, and their slots. The database is
// fresh, so they get ids 1..n.
func seedActive(ctx context.Context, db *sqlx.DB, n int) error {
	return execAll(ctx, db, "seed active backfills", stmt{`
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		SELECT 'active_' || g, '* * * * *', 'UTC', 16, false, now(), now() FROM generate_series(1, $1) g`, []any{n}}, stmt{`
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at)
		SELECT 'active_' || g, '2024-01-01', '2024-01-01 00:03', false, 'none', 10, 'running', now(), now()
		FROM generate_series(1, $1) g`, []any{n}}, stmt{`
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state, run_type,
			backfill_id, backfill_sort_ordinal, attempt, queued_at, worker_id, start_date, lease_expires_at, lease_seconds)
		SELECT b.dag_id, ` + runIDSQL + `, t, t, t + interval '1 minute', CASE WHEN k = 1 THEN 'running' ELSE 'queued' END,
			'backfill', b.id, k, 1, now(), CASE WHEN k = 1 THEN 'bench' END, CASE WHEN k = 1 THEN now() END,
			CASE WHEN k = 1 THEN now() + interval '1 day' END, CASE WHEN k = 1 THEN 3600 END
		FROM backfills b CROSS JOIN generate_series(1, 4) k
		CROSS JOIN LATERAL (SELECT timestamptz '2024-01-01' + (k - 1) * interval '1 minute' AS t) x
		WHERE b.id <= $1`, []any{n}}, stmt{`
		INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id)
		SELECT backfill_id, backfill_sort_ordinal, logical_date, id FROM dag_runs WHERE backfill_id <= $1`, []any{n}}, stmt{
		recount + `WHERE backfill_id <= $1 GROUP BY backfill_id) c WHERE b.id = c.backfill_id`, []any{n}})
}

// recount sets a backfill's counters from its runs, whether or not a trigger counted them
// as they were inserted; the statement using it adds the runs' WHERE and GROUP BY.
const recount = `
	UPDATE backfills b SET num_queued = c.queued, num_running = c.running, num_success = c.success
	FROM (SELECT backfill_id, count(*) FILTER (WHERE state = 'queued') AS queued,
	             count(*) FILTER (WHERE state = 'running') AS running,
	             count(*) FILTER (WHERE state = 'success') AS success
	      FROM dag_runs `

// runIDSQL spells a run id the way the service does, from the column t.
const runIDSQL = `'backfill__' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`

// seedHistory grows the history from `from` to `to` finished runs: succeeded backfills of
// runsPerHistoryBackfill successful runs each, one DAG per backfill, written in chunks so
// that no statement holds a huge transition table.
func seedHistory(ctx context.Context, db *sqlx.DB, from, to int) error {
	const chunk = 2_000 // backfills per transaction
	first, last := from/runsPerHistoryBackfill+1, to/runsPerHistoryBackfill
	for lo := first; lo <= last; lo += chunk {
		hi := min(lo+chunk-1, last)
		dags := []any{lo, hi}
		err := execAll(ctx, db, "seed history", stmt{`
			INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
			SELECT 'hist_' || g, '* * * * *', 'UTC', 16, false, now(), now() FROM generate_series($1::int, $2) g`, dags}, stmt{`
			INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
				state, created_at, updated_at, completed_at)
			SELECT 'hist_' || g, '2023-01-01', timestamptz '2023-01-01' + ($3::int - 1) * interval '1 minute', false,
				'none', 10, 'succeeded', now() - interval '30 days', now() - interval '29 days', now() - interval '29 days'
			FROM generate_series($1::int, $2) g`, []any{lo, hi, runsPerHistoryBackfill}}, stmt{`
			INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state, run_type,
				backfill_id, backfill_sort_ordinal, attempt, queued_at, worker_id, start_date, end_date)
			SELECT b.dag_id, ` + runIDSQL + `, t, t, t + interval '1 minute', 'success', 'backfill', b.id, k, 1,
				b.created_at, 'bench', b.created_at, b.updated_at
			FROM backfills b CROSS JOIN generate_series(1, $3::int) k
			CROSS JOIN LATERAL (SELECT timestamptz '2023-01-01' + (k - 1) * interval '1 minute' AS t) x
			WHERE b.dag_id IN (SELECT 'hist_' || g FROM generate_series($1::int, $2) g)`, []any{lo, hi, runsPerHistoryBackfill}}, stmt{`
			INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id)
			SELECT r.backfill_id, r.backfill_sort_ordinal, r.logical_date, r.id FROM dag_runs r
			WHERE r.dag_id IN (SELECT 'hist_' || g FROM generate_series($1::int, $2) g)`, dags}, stmt{
			recount + `WHERE dag_id IN (SELECT 'hist_' || g FROM generate_series($1::int, $2) g)
			GROUP BY backfill_id) c WHERE b.id = c.backfill_id`, dags})
		if err != nil {
			return err
		}
	}
	return nil
}

// stmt is one statement and its arguments.
type stmt struct {
	q    string
	args []any
}

// execAll runs the statements in one transaction.
func execAll(ctx context.Context, db *sqlx.DB, what string, stmts ...stmt) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.q, s.args...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return tx.Commit()
}

//go:build faults

package faults

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// checkInvariants reads the database in one snapshot (REPEATABLE READ, read only) and returns
// every violation of the lifecycle invariants (the same ones tests/invariants_test.go checks;
// this package cannot import that one):
//
//	(a) no terminal backfill has a queued or running run;
//	(b) at most one active backfill per DAG;
//	(c) no backfill has more running runs than its max_active_runs, no DAG more running runs
//	    outside backfills than its max_active_runs;
//	(d) the num_* counters equal a fresh COUNT(*) of the backfill's slots by the state of their
//	    run (the frozen state for a slot whose run a later backfill took over, skipped for a
//	    slot without run);
//	(e) a succeeded backfill has no failed or canceled run, a failed one has at least one;
//	    completed_at is set exactly when the state is terminal.
//
// It also returns the backfill with the highest running/max_active_runs, for the logs.
func checkInvariants(db *sqlx.DB) (violations []string, peak peakRunning, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, peak, err
	}
	defer func() { _ = tx.Rollback() }()

	check := func(name, query string) error {
		var rows []json.RawMessage
		if err := tx.SelectContext(ctx, &rows, `SELECT to_jsonb(v) FROM (`+query+`) v LIMIT 20`); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, r := range rows {
			violations = append(violations, fmt.Sprintf("invariant %s violated: %s", name, r))
		}
		return nil
	}
	queries := []struct{ name, query string }{
		{"(a) terminal backfill without unfinished runs", `
			SELECT b.id AS backfill_id, b.state AS backfill_state, r.id AS run_id, r.state AS run_state
			FROM backfills b JOIN dag_runs r ON r.backfill_id = b.id
			WHERE b.state IN ('succeeded', 'failed', 'canceled') AND r.state IN ('queued', 'running')`},
		{"(b) one active backfill per DAG", `
			SELECT dag_id, count(*) AS active FROM backfills
			WHERE state IN ('running', 'paused', 'canceling')
			GROUP BY dag_id HAVING count(*) > 1`},
		{"(c) backfill max_active_runs", `
			SELECT b.id, b.state, b.max_active_runs, count(r.id) AS running
			FROM backfills b JOIN dag_runs r ON r.backfill_id = b.id AND r.state = 'running'
			GROUP BY b.id HAVING count(r.id) > b.max_active_runs`},
		{"(c) DAG max_active_runs outside backfills", `
			SELECT d.dag_id, d.max_active_runs, count(*) AS running
			FROM dags d JOIN dag_runs r ON r.dag_id = d.dag_id AND r.backfill_id IS NULL AND r.state = 'running'
			GROUP BY d.dag_id, d.max_active_runs HAVING count(*) > d.max_active_runs`},
		{"(d) counters equal COUNT(*) of slots", `
			WITH slot_states AS (
				SELECT s.backfill_id,
				       CASE WHEN s.dag_run_id IS NULL THEN 'skipped' ELSE coalesce(s.frozen_state, r.state) END AS st
				FROM backfill_dag_runs s LEFT JOIN dag_runs r ON r.id = s.dag_run_id
			), counted AS (
				SELECT backfill_id,
				       count(*) FILTER (WHERE st = 'queued')   AS queued,
				       count(*) FILTER (WHERE st = 'running')  AS running,
				       count(*) FILTER (WHERE st = 'success')  AS success,
				       count(*) FILTER (WHERE st = 'failed')   AS failed,
				       count(*) FILTER (WHERE st = 'canceled') AS canceled,
				       count(*) FILTER (WHERE st = 'skipped')  AS skipped
				FROM slot_states GROUP BY backfill_id
			)
			SELECT b.id, b.state,
			       ARRAY[b.num_queued, b.num_running, b.num_success, b.num_failed, b.num_canceled, b.num_skipped] AS counters,
			       ARRAY[coalesce(c.queued, 0), coalesce(c.running, 0), coalesce(c.success, 0),
			             coalesce(c.failed, 0), coalesce(c.canceled, 0), coalesce(c.skipped, 0)] AS counted
			FROM backfills b LEFT JOIN counted c ON c.backfill_id = b.id
			WHERE (b.num_queued, b.num_running, b.num_success, b.num_failed, b.num_canceled, b.num_skipped)
			      IS DISTINCT FROM
			      (coalesce(c.queued, 0), coalesce(c.running, 0), coalesce(c.success, 0),
			       coalesce(c.failed, 0), coalesce(c.canceled, 0), coalesce(c.skipped, 0))`},
		{"(d) counters equal COUNT(*) of runs", `
			WITH counted AS (
				SELECT backfill_id,
				       count(*) FILTER (WHERE state = 'queued')   AS queued,
				       count(*) FILTER (WHERE state = 'running')  AS running,
				       count(*) FILTER (WHERE state = 'success')  AS success,
				       count(*) FILTER (WHERE state = 'failed')   AS failed,
				       count(*) FILTER (WHERE state = 'canceled') AS canceled
				FROM dag_runs WHERE backfill_id IS NOT NULL GROUP BY backfill_id
			)
			SELECT b.id, b.state,
			       ARRAY[b.num_queued, b.num_running, b.num_success, b.num_failed, b.num_canceled] AS counters,
			       ARRAY[coalesce(c.queued, 0), coalesce(c.running, 0), coalesce(c.success, 0),
			             coalesce(c.failed, 0), coalesce(c.canceled, 0)] AS counted
			FROM backfills b LEFT JOIN counted c ON c.backfill_id = b.id
			WHERE NOT EXISTS (SELECT 1 FROM backfill_dag_runs s WHERE s.backfill_id = b.id AND s.frozen_state IS NOT NULL)
			  AND (b.num_queued, b.num_running, b.num_success, b.num_failed, b.num_canceled)
			      IS DISTINCT FROM
			      (coalesce(c.queued, 0), coalesce(c.running, 0), coalesce(c.success, 0),
			       coalesce(c.failed, 0), coalesce(c.canceled, 0))`},
		{"(e) terminal state agrees with the runs", `
			SELECT id, state, num_success, num_failed, num_canceled FROM backfills
			WHERE (state = 'succeeded' AND num_failed + num_canceled > 0)
			   OR (state = 'failed' AND num_failed + num_canceled = 0)
			   OR ((completed_at IS NOT NULL) <> (state IN ('succeeded', 'failed', 'canceled')))`},
	}
	for _, q := range queries {
		if err := check(q.name, q.query); err != nil {
			return violations, peak, err
		}
	}
	err = tx.GetContext(ctx, &peak, `
		SELECT coalesce(max(running), 0) AS running, coalesce(max(max_active_runs), 0) AS max_active_runs FROM (
			SELECT b.max_active_runs, count(r.id) AS running
			FROM backfills b JOIN dag_runs r ON r.backfill_id = b.id AND r.state = 'running'
			GROUP BY b.id ORDER BY count(r.id)::float / b.max_active_runs DESC, count(r.id) DESC LIMIT 1) v`)
	return violations, peak, err
}

// peakRunning is a backfill's running runs against its max_active_runs.
type peakRunning struct {
	Running int `db:"running"`
	Max     int `db:"max_active_runs"`
}

func (p peakRunning) ratio() float64 {
	if p.Max == 0 {
		return 0
	}
	return float64(p.Running) / float64(p.Max)
}

// higher keeps the higher of two peaks.
func (p peakRunning) higher(q peakRunning) peakRunning {
	if q.ratio() > p.ratio() || (q.ratio() == p.ratio() && q.Running > p.Running) {
		return q
	}
	return p
}

func (p peakRunning) String() string { return fmt.Sprintf("%d/%d", p.Running, p.Max) }

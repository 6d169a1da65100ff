// Package invariants checks, in one consistent snapshot, the promises the service keeps in
// its database. The race and fault tests call it at checkpoints while load runs.
package invariants

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
)

// Report is what one check saw: the violations, and figures for the test's log.
type Report struct {
	Violations []string
	Backfills  int
	Active     int
	// The highest running/max_active_runs over all backfills at this check.
	PeakRunning int
	PeakMax     int
	PeakRatio   float64
	// Terminal backfills as read, so that a caller can verify their record never changes.
	Terminal map[int64]TerminalRow
}

// TerminalRow is the part of a terminal backfill that must never change again.
type TerminalRow struct {
	State       string    `db:"state"`
	CompletedAt time.Time `db:"completed_at"`
	UpdatedAt   time.Time `db:"updated_at"`
	repo.Progress
}

// Check reads the database in one snapshot (REPEATABLE READ, read only) and reports every
// violation of:
//
//	(a) no terminal backfill has a queued or running run;
//	(b) at most one active backfill per DAG;
//	(c) no backfill has more running runs than its max_active_runs, no DAG more running
//	    runs outside backfills than its max_active_runs;
//	(d) the num_* counters equal a fresh count of the backfill's slots by the state of their
//	    run as backfill_slot_records shows it (the state at the takeover for a slot whose run
//	    a later backfill took over, skipped for a slot without run), a slot not taken over
//	    points at a run this backfill owns, and a taken-over slot's run is owned by a later
//	    backfill;
//	(e) a succeeded backfill has no failed or canceled run, a failed one has at least one,
//	    and completed_at is set exactly when the state is terminal;
//	(f) pause_reason is set exactly when the backfill is paused, and is user or
//	    failure_budget (a running backfill may be over its budget after an unpause or a
//	    lowered max_failed_runs, so the budget itself is no property of a snapshot: the
//	    tests check it at the failures);
//	(g) a retry's slots are slots of its parent whose run ended failed or canceled, and its
//	    parent is terminal;
//	(h) a pool's num_running and num_queued equal a fresh count of its runs (a backfill's runs
//	    are in the backfill's pool, a manual run in its own), and with InstallClaimAudit no
//	    claim committed while its pool ran more runs than its slots (see pools.go);
//	(i) with InstallClaimAudit, in any window of a paced pool's `per`, at most its `runs`
//	    starts of its runs (the pace in force at the window's last start);
//	(j)-(l) the groups' dependencies and lifecycle (groups.go);
//	(m) the outbox's rows, each of one backfill or one group, thin or written as before
//	    (events.go).
//
// With InstallClaimAudit, (c) for backfills is checked on every claim's commit (running never
// above the max_active_runs in force then), since a PATCH may lower the limit below what runs.
//
// It returns an error only when it could not read.
func Check(ctx context.Context, db *sqlx.DB) (Report, error) {
	rep := Report{Terminal: map[int64]TerminalRow{}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return rep, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	var firstErr error
	check := func(name, query string, args ...any) {
		if firstErr != nil {
			return
		}
		var rows []json.RawMessage
		if err := tx.SelectContext(ctx, &rows, `SELECT to_jsonb(v) FROM (`+query+`) v LIMIT 20`, args...); err != nil {
			firstErr = fmt.Errorf("%s: %w", name, err)
			return
		}
		for _, r := range rows {
			rep.Violations = append(rep.Violations, fmt.Sprintf("invariant %s violated: %s", name, r))
		}
	}

	check("(a) terminal backfill without unfinished runs", `
		SELECT b.id AS backfill_id, b.state AS backfill_state, r.id AS run_id, r.state AS run_state
		FROM backfills b JOIN dag_runs r ON r.backfill_id = b.id
		WHERE b.state IN ('succeeded', 'failed', 'canceled') AND r.state IN ('queued', 'running')`)

	check("(b) one active backfill per DAG", `
		SELECT dag_id, count(*) AS active FROM backfills
		WHERE state IN ('running', 'paused', 'canceling')
		GROUP BY dag_id HAVING count(*) > 1`)

	audited, err := claimAuditInstalled(ctx, tx)
	if err != nil {
		return rep, fmt.Errorf("claim audit: %w", err)
	}
	if audited {
		check("(c) claim committed above max_active_runs in force", `
			SELECT backfill_id, running, max_active_runs FROM invariants_claim_audit WHERE running > max_active_runs`)
		check("(c) claim committed while its backfill was not running", `
			SELECT backfill_id, state FROM invariants_claim_audit WHERE state <> 'running'`)
	}

	var caps []struct {
		ID            int64  `db:"id"`
		State         string `db:"state"`
		MaxActiveRuns int    `db:"max_active_runs"`
		Running       int    `db:"running"`
	}
	if err := tx.SelectContext(ctx, &caps, `
		SELECT b.id, b.state, b.max_active_runs,
		       (SELECT count(*) FROM dag_runs r WHERE r.backfill_id = b.id AND r.state = 'running') AS running
		FROM backfills b ORDER BY b.id`); err != nil {
		return rep, fmt.Errorf("running runs per backfill: %w", err)
	}
	for _, c := range caps {
		rep.Backfills++
		switch c.State {
		case "running", "paused", "canceling":
			rep.Active++
		}
		if c.Running > c.MaxActiveRuns && !audited {
			rep.Violations = append(rep.Violations, fmt.Sprintf(
				"invariant (c) violated: backfill %d (%s) has %d running runs, max_active_runs %d",
				c.ID, c.State, c.Running, c.MaxActiveRuns))
		}
		if ratio := float64(c.Running) / float64(c.MaxActiveRuns); ratio > rep.PeakRatio ||
			(ratio == rep.PeakRatio && c.Running > rep.PeakRunning) {
			rep.PeakRatio, rep.PeakRunning, rep.PeakMax = ratio, c.Running, c.MaxActiveRuns
		}
	}

	check("(c) DAG max_active_runs outside backfills", `
		SELECT d.dag_id, d.max_active_runs, count(*) AS running
		FROM dags d JOIN dag_runs r ON r.dag_id = d.dag_id AND r.backfill_id IS NULL AND r.state = 'running'
		GROUP BY d.dag_id, d.max_active_runs HAVING count(*) > d.max_active_runs`)

	check("(d) counters equal slot counts", `
		WITH slot_states AS (
			SELECT s.backfill_id,
			       CASE WHEN s.dag_run_id IS NULL THEN 'skipped' ELSE s.state END AS st
			FROM backfill_slot_records s
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
		       coalesce(c.failed, 0), coalesce(c.canceled, 0), coalesce(c.skipped, 0))`)

	// The brief's plain form, for backfills none of whose runs moved away: counters equal
	// a count of the runs that name the backfill.
	check("(d) counters equal run counts", `
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
		WHERE NOT EXISTS (SELECT 1 FROM backfill_slot_records s WHERE s.backfill_id = b.id AND s.taken_over)
		  AND (b.num_queued, b.num_running, b.num_success, b.num_failed, b.num_canceled)
		      IS DISTINCT FROM
		      (coalesce(c.queued, 0), coalesce(c.running, 0), coalesce(c.success, 0),
		       coalesce(c.failed, 0), coalesce(c.canceled, 0))`)

	check("(d) a slot not taken over points at a run of its backfill, a taken-over one at a later backfill's", `
		SELECT s.backfill_id, s.sort_ordinal, s.taken_over, r.id AS run_id, r.backfill_id AS run_backfill_id
		FROM backfill_slot_records s JOIN dag_runs r ON r.id = s.dag_run_id
		WHERE CASE WHEN s.taken_over THEN r.backfill_id IS NULL OR r.backfill_id <= s.backfill_id
		           ELSE r.backfill_id IS DISTINCT FROM s.backfill_id END`)

	check("(e) terminal state agrees with the runs", `
		SELECT id, state, num_success, num_failed, num_canceled FROM backfills
		WHERE (state = 'succeeded' AND num_failed + num_canceled > 0)
		   OR (state = 'failed' AND num_failed + num_canceled = 0)
		   OR ((completed_at IS NOT NULL) <> (state IN ('succeeded', 'failed', 'canceled')))`)

	check("(f) pause_reason iff paused", `
		SELECT id, state, pause_reason FROM backfills
		WHERE (pause_reason IS NOT NULL) <> (state = 'paused')
		   OR pause_reason NOT IN ('user', 'failure_budget')`)

	check("(g) a retry retries its terminal parent's failed or canceled slots", `
		SELECT c.id AS backfill_id, c.parent_backfill_id, p.state AS parent_state, s.logical_date
		FROM backfills c
		JOIN backfills p ON p.id = c.parent_backfill_id
		JOIN backfill_dag_runs s ON s.backfill_id = c.id
		WHERE p.state NOT IN ('succeeded', 'failed', 'canceled')
		   OR NOT EXISTS (
				SELECT 1 FROM backfill_slot_records ps
				WHERE ps.backfill_id = p.id AND ps.logical_date = s.logical_date
				  AND ps.state IN ('failed', 'canceled'))`)

	checkPools(check, audited)
	checkGroups(check)
	checkEvents(check)

	if firstErr != nil {
		return rep, firstErr
	}
	var terminal []struct {
		ID int64 `db:"id"`
		TerminalRow
	}
	if err := tx.SelectContext(ctx, &terminal, `
		SELECT id, state, completed_at, updated_at, num_queued, num_running, num_success, num_failed,
		       num_canceled, num_skipped
		FROM backfills WHERE state IN ('succeeded', 'failed', 'canceled')`); err != nil {
		return rep, fmt.Errorf("terminal backfills: %w", err)
	}
	for _, r := range terminal {
		rep.Terminal[r.ID] = r.TerminalRow
	}
	return rep, nil
}

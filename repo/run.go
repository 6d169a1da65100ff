package repo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/backfillsvc/backfill/schedule"
	"github.com/jmoiron/sqlx"
)

// RunIDFor names a run the way Airflow does: its type, two underscores, the logical date in UTC
// RFC 3339 with its fractional seconds when they are not zero (trailing zeros dropped:
// manual__2024-01-01T00:00:00.5Z). Dropping them would give runs at 00:00:00 and 00:00:00.5
// one run id, and the second a false run_already_exists. Dates carry microseconds at most
// (finer ones are refused at the edge), so the id is exact.
func RunIDFor(runType domain.RunType, logicalDate time.Time) string {
	return string(runType) + "__" + logicalDate.UTC().Format(time.RFC3339Nano)
}

// RunCreateParams triggers a manual run.
type RunCreateParams struct {
	DagID       string
	LogicalDate time.Time
	Conf        JSON
	// IdempotencyKey, when set, makes a retry answer the run the first request created.
	IdempotencyKey string
	// Pool is the pool the run is claimed in; nil for none.
	Pool *string
}

// RunCreate inserts a queued manual run. It reports replayed = true when it answered, as it
// is now, the run an earlier request with the same idempotency key created.
func (s *Store) RunCreate(ctx context.Context, p RunCreateParams) (Run, bool, error) {
	defer s.claimableMayHaveChanged()
	p.LogicalDate = p.LogicalDate.UTC().Truncate(time.Microsecond)
	keyless := p
	keyless.IdempotencyKey, keyless.Conf = "", nil
	fp, err := domain.RequestFingerprint(keyless, p.Conf)
	if err != nil {
		return Run{}, false, err
	}
	r := idemRequest{key: p.IdempotencyKey, op: opDagRun, fp: fp}
	replay := func(ctx context.Context, q pgrun.Queryer, ids []int64) (Run, error) {
		var run Run
		err := sqlx.GetContext(ctx, q, &run, `SELECT `+runColumns+` FROM dag_runs WHERE id = $1`, ids[0])
		if isNoRows(err) {
			return Run{}, ErrRunNotFound
		}
		if err != nil {
			return Run{}, fmt.Errorf("replay run: %w", err)
		}
		return run, nil
	}
	return idempotent(ctx, s, r, replay, func(tx *sqlx.Tx) (Run, []int64, *string, error) {
		run, err := runInsertManual(ctx, tx, p)
		return run, []int64{run.ID}, &p.DagID, err
	})
}

// runInsertManual inserts a queued manual run of an existing DAG in tx.
func runInsertManual(ctx context.Context, tx *sqlx.Tx, p RunCreateParams) (Run, error) {
	// FOR KEY SHARE: the DAG must exist until this run commits.
	dag, err := dagGet(ctx, tx, p.DagID, "FOR KEY SHARE")
	if err != nil {
		return Run{}, err
	}
	sched, err := schedule.Parse(dag.Schedule, dag.Timezone)
	if err != nil {
		return Run{}, fmt.Errorf("%w: %w", domain.ErrInvalidDag, err)
	}
	var run Run
	err = sqlx.GetContext(ctx, tx, &run, `
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end,
			state, run_type, conf, attempt, queued_at, pool)
		VALUES ($1, $2, $3, $3, $4, 'queued', 'manual', $5, 1, backfill_now(), $6)
		RETURNING `+runColumns,
		p.DagID, RunIDFor(domain.RunTypeManual, p.LogicalDate), p.LogicalDate, sched.Next(p.LogicalDate), JSON(p.Conf), p.Pool)
	switch uniqueViolation(err) {
	case constraintRunPerDate, constraintRunIDPerDag:
		return Run{}, ErrRunAlreadyExists
	}
	if errors.Is(poolMissing(err), ErrUnknownPool) {
		return Run{}, fmt.Errorf("%w: %s", ErrUnknownPool, *p.Pool)
	}
	if err != nil {
		return Run{}, fmt.Errorf("insert manual run: %w", err)
	}
	return run, nil
}

// RunGet returns one run by its run_id.
func (s *Store) RunGet(ctx context.Context, dagID, runID string) (Run, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Run, error) { return s.runGetOnce(ctx, q, dagID, runID) })
}

// runGetOnce is one attempt of RunGet, which sends it again if its session dies.
func (s *Store) runGetOnce(ctx context.Context, q pgrun.Queryer, dagID, runID string) (Run, error) {
	var run Run
	err := sqlx.GetContext(ctx, q, &run,
		`SELECT `+runColumns+` FROM dag_runs WHERE dag_id = $1 AND run_id = $2`, dagID, runID)
	if isNoRows(err) {
		return Run{}, s.runNotFound(ctx, q, dagID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run %s/%s: %w", dagID, runID, err)
	}
	return run, nil
}

// runNotFound tells a missing DAG from a missing run.
func (s *Store) runNotFound(ctx context.Context, q sqlx.QueryerContext, dagID string) error {
	if _, err := dagGet(ctx, q, dagID, ""); err != nil {
		return err
	}
	return ErrRunNotFound
}

// RunListParams filters a DAG's runs.
type RunListParams struct {
	DagID      string
	State      *string
	BackfillID *int64
	ListParams
}

// RunList pages a DAG's runs by logical date.
func (s *Store) RunList(ctx context.Context, p RunListParams) ([]Run, int, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]Run, int, error) { return s.runListOnce(ctx, q, p) })
}

// runListOnce is one attempt of RunList, which sends it again if its session dies.
func (s *Store) runListOnce(ctx context.Context, q pgrun.Queryer, p RunListParams) ([]Run, int, error) {
	if _, err := dagGet(ctx, q, p.DagID, ""); err != nil {
		return nil, 0, err
	}
	const filter = ` FROM dag_runs WHERE dag_id = $1
		AND ($2::text IS NULL OR state = $2) AND ($3::bigint IS NULL OR backfill_id = $3)`
	var total int
	if err := sqlx.GetContext(ctx, q, &total, `SELECT count(*)`+filter, p.DagID, p.State, p.BackfillID); err != nil {
		return nil, 0, fmt.Errorf("count runs: %w", err)
	}
	runs := []Run{}
	// logical_date is unique per DAG (dag_runs_dag_id_logical_date_key), so it is the key.
	err := sqlx.SelectContext(ctx, q, &runs, `SELECT `+runColumns+filter+`
		AND ($6::text IS NULL OR logical_date > $6::timestamptz) ORDER BY logical_date LIMIT $4 OFFSET $5`,
		p.DagID, p.State, p.BackfillID, p.Limit, p.Offset, p.After)
	if err != nil {
		return nil, 0, fmt.Errorf("list runs: %w", err)
	}
	return runs, total, nil
}

// RunReportParams reports a run's outcome.
type RunReportParams struct {
	DagID string
	RunID string
	State domain.RunState
	// WorkerID, when set, requires the run to be running under this worker's live lease.
	WorkerID *string
	// Note is what the reporter says about the outcome (why a run failed); nil for none.
	Note *string
	// RetryAfterSeconds is how long a deferred run (State domain.RunDeferred) waits before
	// a claim may hand it out again; the handler checks its range.
	RetryAfterSeconds int
}

// RunReport moves a queued or running run to a terminal state.
func (s *Store) RunReport(ctx context.Context, p RunReportParams) (Run, error) {
	// A report ends a running run (a slot frees) or marks a queued one.
	defer s.claimableMayHaveChanged()
	if p.State != domain.RunSuccess {
		// A failure may spend the last of the failure budget and pause the backfill.
		defer s.eventsMayBeWritten()
	}
	switch p.State {
	case domain.RunSuccess, domain.RunFailed, domain.RunCanceled:
	case domain.RunDeferred:
		return s.runDefer(ctx, p)
	default:
		// Only a claim starts a run, and nothing leaves a terminal state through a report.
		return Run{}, ErrInvalidTransition
	}
	// One statement, so one round trip and the shortest lock: the CTE finds the run and locks
	// its backfill row (FOR NO KEY UPDATE in a scalar subquery) before the UPDATE can lock the
	// run, because the UPDATE needs the CTE's row to know which run to lock. Backfill row
	// first, then its run: the order every path takes, so a report cannot deadlock with a
	// cancel or a claim, and the sweep cannot finalize the backfill in between.
	//
	// It runs on the lease pool, outside any transaction, and bounds its lock waits by
	// LOCK_WAIT in the statement itself (statementLockWait), as a heartbeat does: a report of
	// a run whose backfill another transaction holds for long answers 503 busy after
	// LOCK_WAIT, nothing written, without the three more round trips of BEGIN, SET LOCAL and
	// COMMIT, which cost a claim + report cycle more database CPU than the report itself.
	// A lost answer is outcome-unknown, never sent again (outcome.go), as for a COMMIT.
	var run Run
	ctx = onLeasePool(ctx)
	err := s.withRetry(ctx, func(a attempt) error {
		err := sqlx.GetContext(a.ctx, s.hot(a.ctx, a.db, runReportSQL), &run, runReportSQL,
			p.DagID, p.RunID, p.State, p.WorkerID, p.Note, a.lockWait)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("report run: %w", err)
		}
		return err
	})
	if !isNoRows(err) {
		return run, err
	}
	// Nothing changed: say why.
	cur, err := s.RunGet(ctx, p.DagID, p.RunID)
	if err != nil {
		return Run{}, err
	}
	if p.WorkerID != nil {
		if sameReport(cur, p) {
			// This worker's report of this outcome is already recorded: a retry of a report
			// whose answer was lost (503 outcome_unknown) answers what the first did.
			return cur, nil
		}
		return Run{}, ErrLeaseLost
	}
	return Run{}, ErrInvalidTransition
}

// runReportSQL is RunReport's statement, prepared on the lease pool (pgrun/prepared.go).
var runReportSQL = `
	WITH cur AS MATERIALIZED (
		SELECT r.id, r.backfill_id,
			(SELECT b.id FROM backfills b WHERE b.id = r.backfill_id FOR NO KEY UPDATE) AS locked
		FROM dag_runs r WHERE r.dag_id = $1 AND r.run_id = $2 AND ` + statementLockWait("$6") + `
	)
	UPDATE dag_runs d SET state = $3, end_date = backfill_now(), lease_expires_at = NULL, note = $5
	FROM cur
	WHERE d.id = cur.id
	  AND d.backfill_id IS NOT DISTINCT FROM cur.backfill_id
	  AND CASE WHEN $4::text IS NULL THEN d.state IN ('queued', 'running')
	           ELSE d.state = 'running' AND d.worker_id = $4 AND d.lease_expires_at > backfill_now() END
	RETURNING ` + prefixed("d.", runColumns)

// sameReport reports whether run already ended as p reports it, by p's worker, with p's note.
func sameReport(run Run, p RunReportParams) bool {
	return run.State == p.State && run.WorkerID != nil && *run.WorkerID == *p.WorkerID &&
		((run.Note == nil && p.Note == nil) || (run.Note != nil && p.Note != nil && *run.Note == *p.Note))
}

// RunHeartbeat extends the lease of the worker that holds it.
func (s *Store) RunHeartbeat(ctx context.Context, runPK int64, workerID string) (Heartbeat, error) {
	var row struct {
		LeaseExpiresAt  time.Time `db:"lease_expires_at"`
		CancelRequested bool      `db:"cancel_requested"`
	}
	// One statement on the lease pool, which locks only the run. Its lease holder alone
	// changes the run, but anyone may hold its row (an operator's SQL, a migration): the
	// statement bounds its wait by LOCK_WAIT like every write of one statement, so that
	// heartbeats of a held run answer 503 busy instead of keeping lease slots for as long as
	// the holder likes (and shedding every other heartbeat meanwhile).
	ctx = onLeasePool(ctx)
	err := s.withRetry(ctx, func(a attempt) error {
		return sqlx.GetContext(a.ctx, s.hot(a.ctx, a.db, runHeartbeatSQL), &row, runHeartbeatSQL, runPK, workerID, a.lockWait)
	})
	if isNoRows(err) {
		return Heartbeat{}, s.leaseLost(ctx, runPK)
	}
	if err != nil {
		return Heartbeat{}, fmt.Errorf("heartbeat run %d: %w", runPK, err)
	}
	return Heartbeat{LeaseExpiresAt: row.LeaseExpiresAt.UTC(), CancelRequested: row.CancelRequested}, nil
}

// runHeartbeatSQL is RunHeartbeat's statement, prepared on the lease pool (pgrun/prepared.go).
var runHeartbeatSQL = `
	WITH hb AS (
		UPDATE dag_runs SET lease_expires_at = backfill_now() + make_interval(secs => lease_seconds)
		WHERE id = $1 AND state = 'running' AND worker_id = $2 AND lease_expires_at > backfill_now()
			AND ` + statementLockWait("$3") + `
		RETURNING lease_expires_at, backfill_id
	)
	SELECT hb.lease_expires_at, coalesce(b.state = 'canceling', false) AS cancel_requested
	FROM hb LEFT JOIN backfills b ON b.id = hb.backfill_id`

// leaseLost explains why a statement guarded by a worker's live lease changed no row:
// ErrRunNotFound when the run does not exist, else ErrLeaseLost (it is not running, another
// worker holds it, or the lease expired).
func (s *Store) leaseLost(ctx context.Context, runPK int64) error {
	exists, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (exists bool, err error) {
		err = sqlx.GetContext(ctx, q, &exists, `SELECT EXISTS (SELECT 1 FROM dag_runs WHERE id = $1)`, runPK)
		return exists, err
	})
	if err != nil {
		return fmt.Errorf("find run %d: %w", runPK, err)
	}
	if !exists {
		return ErrRunNotFound
	}
	return ErrLeaseLost
}

package repo

import "context"

// runDefer hands a queued or running run back because the system it works on asked for a
// pause: it becomes queued with its attempt unchanged (the run did not fail; its system was
// busy) and not_before = now + RetryAfterSeconds, which the claim's run walks respect. A run
// whose backfill is canceling becomes canceled instead, as a release makes it. The statement
// is RunReport's, with the same lock order (the backfill row in the CTE, then the run) and
// the same lease rule, on the lease pool.
func (s *Store) runDefer(ctx context.Context, p RunReportParams) (Run, error) {
	run, err := s.updateRunOnLeasePool(ctx, "defer run", runDeferSQL,
		p.DagID, p.RunID, p.WorkerID, p.Note, p.RetryAfterSeconds)
	if err == nil {
		s.observer.RunDeferred(run.DagID)
	}
	if !isNoRows(err) {
		return run, err
	}
	if _, err := s.RunGet(ctx, p.DagID, p.RunID); err != nil {
		return Run{}, err
	}
	// A deferral leaves no trace of its worker on the queued run, so a retry of one whose
	// answer was lost cannot be told from a late report: lease_lost, which a worker reads as
	// "the run is not yours any more", true either way.
	if p.WorkerID != nil {
		return Run{}, ErrLeaseLost
	}
	return Run{}, ErrInvalidTransition
}

// runDeferSQL is runDefer's statement, prepared on the lease pool (pgrun/prepared.go).
var runDeferSQL = `
	WITH cur AS MATERIALIZED (
		SELECT r.id, r.backfill_id,
			(SELECT b.state FROM backfills b WHERE b.id = r.backfill_id FOR NO KEY UPDATE) AS backfill_state
		FROM dag_runs r WHERE r.dag_id = $1 AND r.run_id = $2
	), v AS (
		SELECT id, backfill_id,
			CASE WHEN backfill_state = 'canceling' THEN 'canceled' ELSE 'queued' END AS next_state
		FROM cur
	)
	UPDATE dag_runs d SET ` + leaseEndSet + `, note = $4,
		not_before = CASE WHEN v.next_state = 'queued'
			THEN backfill_now() + make_interval(secs => $5::int) END
	FROM v
	WHERE d.id = v.id
	  AND d.backfill_id IS NOT DISTINCT FROM v.backfill_id
	  AND CASE WHEN $3::text IS NULL THEN d.state IN ('queued', 'running')
	           ELSE d.state = 'running' AND d.worker_id = $3 AND d.lease_expires_at > backfill_now() END
	RETURNING ` + prefixed("d.", runColumns)

package repo

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// RunRelease hands a running run back from the worker that holds its live lease: it becomes
// queued again with the same attempt, since a clean hand-back is not a failed attempt. A run
// whose backfill is canceling becomes canceled instead, as an expired lease would make it:
// a queued run would keep a canceling backfill from ever finishing.
func (s *Store) RunRelease(ctx context.Context, runPK int64, workerID string) (Run, error) {
	defer s.claimableMayHaveChanged()
	// The backfill row is locked before the run (the order every path takes), in the CTE's
	// scalar subquery, which the UPDATE needs before it can lock the run.
	run, err := s.updateRunOnLeasePool(ctx, fmt.Sprintf("release run %d", runPK), `
		WITH cur AS MATERIALIZED (
			SELECT r.id, r.backfill_id,
				(SELECT b.state FROM backfills b WHERE b.id = r.backfill_id FOR NO KEY UPDATE) AS backfill_state
			FROM dag_runs r WHERE r.id = $1
		), verdict AS (
			SELECT id, backfill_id,
				CASE WHEN backfill_state = 'canceling' THEN 'canceled' ELSE 'queued' END AS next_state
			FROM cur
		)
		UPDATE dag_runs d SET `+leaseEndSet+`
		FROM verdict v
		WHERE d.id = v.id
		  AND d.backfill_id IS NOT DISTINCT FROM v.backfill_id
		  AND d.state = 'running' AND d.worker_id = $2 AND d.lease_expires_at > backfill_now()
		RETURNING `+prefixed("d.", runColumns),
		runPK, workerID)
	if !isNoRows(err) {
		return run, err
	}
	return Run{}, s.leaseLost(onLeasePool(ctx), runPK)
}

// leaseEndSet is the SET list of an UPDATE of dag_runs d whose lease ends, FROM a row v that
// names the run's next_state: queued again (queued now; its start, end and worker cleared),
// or ended now (canceled, failed), keeping who ran it. The lease goes either way. A release
// and the sweep's expiry end leases alike.
const leaseEndSet = `
	state = v.next_state,
	queued_at = CASE WHEN v.next_state = 'queued' THEN backfill_now() ELSE d.queued_at END,
	start_date = CASE WHEN v.next_state = 'queued' THEN NULL ELSE d.start_date END,
	end_date = CASE WHEN v.next_state = 'queued' THEN NULL ELSE backfill_now() END,
	worker_id = CASE WHEN v.next_state = 'queued' THEN NULL ELSE d.worker_id END,
	lease_expires_at = NULL,
	lease_seconds = NULL`

// updateRunOnLeasePool runs one statement that updates a run and returns it, in a transaction
// of the lease pool (for its lock_timeout, LOCK_WAIT). When no row matched it returns an error
// isNoRows accepts, for the caller to find out why nothing changed.
func (s *Store) updateRunOnLeasePool(ctx context.Context, what, query string, args ...any) (Run, error) {
	var run Run
	ctx = onLeasePool(ctx)
	s.prepareHot(ctx, query)
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		err := sqlx.GetContext(ctx, s.hot(ctx, tx, query), &run, query, args...)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return err
	})
	return run, err
}

package repo

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// DagDelete removes a DAG with its runs, its backfills' history and its upstreams. It refuses
// while the DAG has an active backfill (BackfillAlreadyRunningError), while other DAGs name it
// as an upstream (DagHasDownstreamsError), or while a run outside backfills is queued or
// running (ErrRunsInFlight).
//
// It runs at READ COMMITTED and first locks the DAG row FOR UPDATE. Every path that adds to
// a DAG holds a lock that conflicts with that one until it commits: a manual run reads the
// DAG FOR KEY SHARE, a backfill's insert checks its foreign key to the DAG (FOR KEY SHARE).
// So a concurrent addition either committed before the lock was granted, and the checks
// below (each statement a fresh snapshot) see it, or it waits for this transaction and then
// finds no DAG (404, or a serialization failure that its retry turns into 404). A definition
// that names the DAG as an upstream locks it FOR KEY SHARE too (replaceUpstreams): it either
// committed first, and the delete answers 409, or finds the DAG gone.
func (s *Store) DagDelete(ctx context.Context, dagID string) error {
	defer s.eventsMayBeWritten()
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := dagGet(ctx, tx, dagID, "FOR UPDATE"); err != nil {
			return err
		}
		if id, found, err := activeBackfillID(ctx, tx, dagID); err != nil || found {
			if err != nil {
				return err
			}
			return &BackfillAlreadyRunningError{ActiveBackfillID: id}
		}
		downs, err := dagDownstreams(ctx, tx, dagID)
		if err != nil {
			return err
		}
		if len(downs) > 0 {
			return &DagHasDownstreamsError{Downstreams: downs}
		}
		var inFlight bool
		err = sqlx.GetContext(ctx, tx, &inFlight, `
			SELECT EXISTS (SELECT 1 FROM dag_runs
				WHERE dag_id = $1 AND backfill_id IS NULL AND state IN ('queued', 'running'))`, dagID)
		if err != nil {
			return fmt.Errorf("find runs in flight of %q: %w", dagID, err)
		}
		if inFlight {
			return fmt.Errorf("%w: DAG %q has a queued or running run outside backfills", ErrRunsInFlight, dagID)
		}
		// Children first; idempotency keys go with their backfills and runs so that a
		// replay of a deleted backfill's or run's request is answered from scratch (404
		// dag_not_found) rather than pointing at nothing.
		for _, stmt := range []string{
			`DELETE FROM backfill_dag_runs WHERE backfill_id IN (SELECT id FROM backfills WHERE dag_id = $1)`,
			`DELETE FROM idempotency_keys WHERE dag_id = $1`,
			`DELETE FROM dag_run_dependencies WHERE run_id IN (SELECT id FROM dag_runs WHERE dag_id = $1)`,
			`DELETE FROM dag_run_dependencies WHERE upstream_run_id IN (SELECT id FROM dag_runs WHERE dag_id = $1)`,
			`DELETE FROM dag_runs WHERE dag_id = $1`,
			`DELETE FROM backfills WHERE dag_id = $1`,
			`DELETE FROM dags WHERE dag_id = $1`,
		} {
			if _, err := tx.ExecContext(ctx, stmt, dagID); err != nil {
				return fmt.Errorf("delete DAG %q: %w", dagID, err)
			}
		}
		return nil
	})
}

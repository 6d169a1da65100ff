package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// SweepExpireLeases ends up to batch expired leases: the run goes back to queued with attempt
// + 1, or fails once its current go (the attempts since first_attempt, where its creation or
// last reprocess started it) has reached the maximum, or is canceled when its backfill is
// canceling. It returns how many runs it changed.
func (s *Store) SweepExpireLeases(ctx context.Context, batch int) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// Backfill rows first (lock order). SKIP LOCKED: a backfill that another replica or a
		// claim holds is left for the next pass rather than waited for. The backfills are
		// those of the first batch expired runs in lease order, read from the lease index:
		// a DISTINCT over every expired run would read all of them on every batch, and a
		// backlog of n expired runs would cost n²/batch.
		var locked pq.Int64Array
		err := sqlx.SelectContext(ctx, tx, &locked, `
			SELECT id FROM backfills
			WHERE id IN (
				SELECT backfill_id FROM (
					SELECT backfill_id FROM dag_runs
					WHERE state = 'running' AND lease_expires_at <= backfill_now()
					ORDER BY lease_expires_at LIMIT $1) first_expired
				WHERE backfill_id IS NOT NULL)
			ORDER BY id
			FOR NO KEY UPDATE SKIP LOCKED`, batch)
		if err != nil {
			return fmt.Errorf("lock backfills with expired leases: %w", err)
		}
		res, err := tx.ExecContext(ctx, `
			WITH expired AS (
				SELECT id FROM dag_runs
				WHERE state = 'running' AND lease_expires_at <= backfill_now()
				  AND (backfill_id IS NULL OR backfill_id = ANY($1))
				ORDER BY lease_expires_at LIMIT $2
				FOR UPDATE SKIP LOCKED
			), verdict AS (
				SELECT r.id, CASE WHEN b.state = 'canceling' THEN 'canceled'
				                  WHEN r.attempt - r.first_attempt + 1 >= $3 THEN 'failed'
				                  ELSE 'queued' END AS next_state
				FROM dag_runs r JOIN expired e ON e.id = r.id LEFT JOIN backfills b ON b.id = r.backfill_id
			)
			UPDATE dag_runs d SET attempt = d.attempt + (v.next_state = 'queued')::int, `+leaseEndSet+`
			FROM verdict v WHERE d.id = v.id`,
			locked, batch, s.maxAttempts)
		if err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
		affected, err := res.RowsAffected()
		n = int(affected)
		return err
	})
	if err != nil {
		return 0, err
	}
	s.observer.LeasesExpired(n)
	if n > 0 {
		// A run failed by its last attempt may spend the failure budget and pause a backfill.
		s.eventsMayBeWritten()
	}
	return n, nil
}

// SweepFinalize makes up to batch active backfills terminal: canceling ones with no run left
// running become canceled, running or paused ones whose runs are all finished become failed
// (if any run failed or was canceled) or succeeded. The decision reads counters on the
// backfill row itself, which every run change updates under the row's lock; so a concurrent
// claim, report or requeue either commits first (and is seen) or waits for this one.
func (s *Store) SweepFinalize(ctx context.Context, batch int) (int, error) {
	var finished []domain.BackfillState
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		finished = finished[:0]
		return sqlx.SelectContext(ctx, tx, &finished, sweepFinalizeSQL, batch)
	})
	if err != nil {
		return 0, fmt.Errorf("finalize backfills: %w", err)
	}
	for _, state := range finished {
		s.observer.BackfillFinalized(string(state))
	}
	if len(finished) > 0 {
		s.eventsMayBeWritten()
	}
	return len(finished), nil
}

// sweepFinalizeSQL is SweepFinalize's statement. The candidates are read through
// backfills_active_by_id (in id order, so the cost grows with active backfills, not history);
// the UPDATE re-checks under the row lock.
var sweepFinalizeSQL = `
	WITH candidates AS (
		SELECT id FROM backfills
		WHERE state IN ` + activeStatesSQL + ` AND num_queued = 0 AND num_running = 0
		ORDER BY id LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
	UPDATE backfills b SET
		state = CASE WHEN b.state = 'canceling' THEN 'canceled'
		             WHEN b.num_failed + b.num_canceled > 0 THEN 'failed'
		             ELSE 'succeeded' END,
		completed_at = backfill_now(),
		updated_at = backfill_change_time(b.updated_at)
	FROM candidates c
	WHERE b.id = c.id
	  AND b.state IN ` + activeStatesSQL + ` AND b.num_queued = 0 AND b.num_running = 0
	RETURNING b.state`

// SweepFinalizeGroups makes up to batch active groups terminal once every member is: canceled
// when the group was canceling, succeeded when every member succeeded, failed otherwise. The
// members are read at READ COMMITTED under the group's row lock, so a group never ends before
// its last member's end has committed, and every replica may run it at once (SKIP LOCKED).
func (s *Store) SweepFinalizeGroups(ctx context.Context, batch int) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, sweepFinalizeGroupsSQL, batch)
		if err != nil {
			return err
		}
		affected, err := res.RowsAffected()
		n = int(affected)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("finalize backfill groups: %w", err)
	}
	if n > 0 {
		s.eventsMayBeWritten()
	}
	return n, nil
}

// sweepFinalizeGroupsSQL is SweepFinalizeGroups' statement, over backfill_groups_active_by_id.
var sweepFinalizeGroupsSQL = `
	WITH candidates AS (
		SELECT id FROM backfill_groups g
		WHERE state IN ` + activeStatesSQL + `
		  AND NOT EXISTS (SELECT 1 FROM backfills b WHERE b.group_id = g.id AND b.state IN ` + activeStatesSQL + `)
		ORDER BY id LIMIT $1
		FOR NO KEY UPDATE SKIP LOCKED
	)
	UPDATE backfill_groups g SET
		state = CASE WHEN g.state = 'canceling' THEN 'canceled'
		             WHEN EXISTS (SELECT 1 FROM backfills b WHERE b.group_id = g.id AND b.state <> 'succeeded') THEN 'failed'
		             ELSE 'succeeded' END,
		pause_reason = NULL,
		completed_at = backfill_now(),
		updated_at = backfill_change_time(g.updated_at)
	FROM candidates c
	WHERE g.id = c.id
	  AND NOT EXISTS (SELECT 1 FROM backfills b WHERE b.group_id = g.id AND b.state IN ` + activeStatesSQL + `)`

// SweepPruneIdempotencyKeys deletes up to batch keys older than maxAge.
func (s *Store) SweepPruneIdempotencyKeys(ctx context.Context, maxAge time.Duration, batch int) (int, error) {
	return s.prune(ctx, pruneIdempotencyKeys, maxAge, batch)
}

// pruning is one of the sweep's age-based trims: its statement, and its name for errors.
type pruning struct {
	what string // for errors
	stmt string
}

// pruneStatement deletes up to $2 rows older than $1 seconds, oldest first, by the key, so
// that the subquery's LIMIT bounds each batch (DELETE has no LIMIT of its own).
func pruneStatement(table, key, datedBy string) string {
	return `DELETE FROM ` + table + ` WHERE ` + key + ` IN (
		SELECT ` + key + ` FROM ` + table + `
		WHERE ` + datedBy + ` < backfill_now() - make_interval(secs => $1) ORDER BY ` + datedBy + ` LIMIT $2)`
}

var (
	pruneIdempotencyKeys  = pruning{"idempotency keys", pruneStatement("idempotency_keys", "key", "created_at")}
	pruneDeletedBackfills = pruning{"deleted backfills' bounds", `
		WITH gone AS (` + pruneStatement("deleted_backfills", "id", "deleted_at") + ` RETURNING id),
		descriptions AS (DELETE FROM backfill_descriptions d USING gone WHERE d.backfill_id = gone.id)
		SELECT id FROM gone`}
)

// SweepPruneDeletedBackfills deletes up to batch bounds of deleted backfills kept longer than
// maxAge (migrations/00022): a read of a deleted backfill's events starts at its bound while
// any of them may remain, so maxAge is more than the events' retention. The descriptions its
// events rendered go with it.
func (s *Store) SweepPruneDeletedBackfills(ctx context.Context, maxAge time.Duration, batch int) (int, error) {
	return s.prune(ctx, pruneDeletedBackfills, maxAge, batch)
}

// prune deletes one batch of what p prunes and says how many rows went.
func (s *Store) prune(ctx context.Context, p pruning, maxAge time.Duration, batch int) (int, error) {
	return s.deleted(ctx, "prune "+p.what, p.stmt, maxAge.Seconds(), batch)
}

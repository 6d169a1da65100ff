package repo

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// RunClaimParams asks for queued runs to execute.
type RunClaimParams struct {
	WorkerID     string
	Limit        int
	LeaseSeconds int
	// DagID, when set, restricts the claim to one DAG.
	DagID *string
}

// claimCandidates bounds how many DAGs or backfills one claim looks at.
const claimCandidates = 64

// RunClaim moves up to Limit queued runs to running, leased to the worker. Runs outside
// backfills come first (someone is waiting for them), then backfills oldest first, each in
// sort_ordinal order. Caps hold exactly under concurrent claims because each owner row (the
// DAG for runs outside backfills, the backfill otherwise) is locked before its running runs
// are counted and its queued runs are taken.
func (s *Store) RunClaim(ctx context.Context, p RunClaimParams) ([]Run, error) {
	var claimed []Run
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		claimed = claimed[:0]
		c := claimer{tx: tx, p: p}
		if err := c.claimOutsideBackfills(ctx); err != nil {
			return err
		}
		if err := c.claimFromBackfills(ctx); err != nil {
			return err
		}
		claimed = c.runs
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.observer.RunsClaimed(len(claimed))
	if claimed == nil {
		claimed = []Run{}
	}
	return claimed, nil
}

type claimer struct {
	tx   *sqlx.Tx
	p    RunClaimParams
	runs []Run
}

func (c *claimer) remaining() int { return c.p.Limit - len(c.runs) }

// claimOutsideBackfills hands out manual runs of unpaused DAGs under each DAG's max_active_runs.
func (c *claimer) claimOutsideBackfills(ctx context.Context) error {
	var dagIDs []string
	err := sqlx.SelectContext(ctx, c.tx, &dagIDs, `
		SELECT d.dag_id FROM dags d
		WHERE d.dag_id IN (
			SELECT r.dag_id FROM dag_runs r
			WHERE r.backfill_id IS NULL AND r.state = 'queued' AND ($1::text IS NULL OR r.dag_id = $1))
		  AND NOT d.is_paused
		ORDER BY d.dag_id LIMIT $2`, c.p.DagID, claimCandidates)
	if err != nil {
		return fmt.Errorf("find dags with queued runs: %w", err)
	}
	for _, dagID := range dagIDs {
		if c.remaining() == 0 {
			return nil
		}
		var dag struct {
			MaxActiveRuns int  `db:"max_active_runs"`
			IsPaused      bool `db:"is_paused"`
		}
		// Lock first, count second: the count is then exact until this transaction ends.
		err := sqlx.GetContext(ctx, c.tx, &dag, `
			SELECT max_active_runs, is_paused FROM dags WHERE dag_id = $1 FOR NO KEY UPDATE`, dagID)
		if err != nil {
			return fmt.Errorf("lock dag %q: %w", dagID, err)
		}
		if dag.IsPaused {
			continue
		}
		var running int
		err = sqlx.GetContext(ctx, c.tx, &running, `
			SELECT count(*) FROM dag_runs WHERE dag_id = $1 AND backfill_id IS NULL AND state = 'running'`, dagID)
		if err != nil {
			return fmt.Errorf("count running runs of %q: %w", dagID, err)
		}
		take := min(dag.MaxActiveRuns-running, c.remaining())
		if take <= 0 {
			continue
		}
		if err := c.take(ctx, `
			SELECT id, logical_date AS claim_order FROM dag_runs
			WHERE dag_id = $3 AND backfill_id IS NULL AND state = 'queued'
			ORDER BY logical_date LIMIT $4 FOR UPDATE SKIP LOCKED`, dagID, take); err != nil {
			return err
		}
	}
	return nil
}

// claimFromBackfills hands out runs of running backfills under each one's max_active_runs.
func (c *claimer) claimFromBackfills(ctx context.Context) error {
	if c.remaining() == 0 {
		return nil
	}
	var ids []int64
	err := sqlx.SelectContext(ctx, c.tx, &ids, `
		SELECT id FROM backfills
		WHERE state = 'running' AND num_queued > 0 AND num_running < max_active_runs
		  AND ($1::text IS NULL OR dag_id = $1)
		ORDER BY id LIMIT $2`, c.p.DagID, claimCandidates)
	if err != nil {
		return fmt.Errorf("find backfills with queued runs: %w", err)
	}
	for _, id := range ids {
		if c.remaining() == 0 {
			return nil
		}
		var b struct {
			State         string `db:"state"`
			MaxActiveRuns int    `db:"max_active_runs"`
			Running       int    `db:"num_running"`
			Queued        int    `db:"num_queued"`
		}
		// A blocking lock, taken in id order by every claimer: the re-read counters are then
		// exact, and claimers queue instead of deadlocking.
		err := sqlx.GetContext(ctx, c.tx, &b, `
			SELECT state, max_active_runs, num_running, num_queued FROM backfills WHERE id = $1 FOR NO KEY UPDATE`, id)
		if err != nil {
			return fmt.Errorf("lock backfill %d: %w", id, err)
		}
		if b.State != BackfillRunning {
			continue
		}
		take := min(b.MaxActiveRuns-b.Running, b.Queued, c.remaining())
		if take <= 0 {
			continue
		}
		if err := c.take(ctx, `
			SELECT id, backfill_sort_ordinal AS claim_order FROM dag_runs
			WHERE backfill_id = $3 AND state = 'queued'
			ORDER BY backfill_sort_ordinal LIMIT $4 FOR UPDATE SKIP LOCKED`, id, take); err != nil {
			return err
		}
	}
	return nil
}

// take leases the runs that pick selects (parameters $3 and $4 are the owner and the count).
func (c *claimer) take(ctx context.Context, pick string, owner any, n int) error {
	var runs []Run
	err := sqlx.SelectContext(ctx, c.tx, &runs, `
		WITH picked AS (`+pick+`),
		claimed AS (
			UPDATE dag_runs r SET state = 'running', worker_id = $1, start_date = backfill_now(), end_date = NULL,
				lease_seconds = $2::int, lease_expires_at = backfill_now() + make_interval(secs => $2::int)
			FROM picked WHERE r.id = picked.id
			RETURNING r.*, picked.claim_order
		)
		SELECT `+runColumns+` FROM claimed ORDER BY claim_order`,
		c.p.WorkerID, c.p.LeaseSeconds, owner, n)
	if err != nil {
		return fmt.Errorf("claim runs: %w", err)
	}
	c.runs = append(c.runs, runs...)
	return nil
}

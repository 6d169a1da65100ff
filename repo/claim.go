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

// RunClaim moves up to Limit queued runs to running, leased to the worker. Runs outside
// backfills come first (someone is waiting for them), DAGs in dag_id order, each DAG's runs by
// logical date; then backfills oldest first, each in sort_ordinal order.
//
// The claim is one statement (claimStatement), so one round trip and one implicit
// transaction. It finds owners through the partial indexes of claimable owners
// (migrations/00005_fair_claims.sql), so idle, paused and saturated DAGs and backfills cost
// nothing, however many there are. Caps hold exactly under concurrent claims because each owner
// row is locked before its room is read and its runs are taken: a claimer that meets a locked
// owner waits, and then sees the owner's newest counters.
func (s *Store) RunClaim(ctx context.Context, p RunClaimParams) ([]Run, error) {
	scope, args := claimAnyDag, []any{p.WorkerID, p.LeaseSeconds, p.Limit}
	if p.DagID != nil {
		scope, args = claimOneDag, append(args, *p.DagID)
	}
	var claimed []Run
	// A deadlock (40P01) is possible, if rare: the sweep's lease expiry locks backfill rows
	// before DAG rows, a claim that spans both kinds of owner the other way round.
	err := s.withRetry(ctx, func() error {
		claimed = claimed[:0]
		err := sqlx.SelectContext(ctx, s.db, &claimed, claimStatement(scope), args...)
		if err != nil {
			return fmt.Errorf("claim runs: %w", err)
		}
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

// claimScope tells the two forms of the claim statement apart.
type claimScope int

const (
	claimAnyDag claimScope = iota // $1 worker_id, $2 lease_seconds, $3 limit
	claimOneDag                   // the same and $4 dag_id
)

// claimStatement is the claim, in one statement, sent unprepared (lib/pq's unnamed statement):
// a statement prepared on the pool would outlive its transaction, which a transaction pooler
// does not allow. Its plan:
//
//  1. dag_owner and backfill_owner walk the partial indexes of claimable owners in claim order
//     (DAGs by dag_id, backfills by id), one owner per step, and lock each owner row as it is
//     reached. FOR NO KEY UPDATE blocks behind a concurrent claimer; READ COMMITTED then
//     re-evaluates the WHERE clause on the newest row version, so an owner that another claimer
//     filled meanwhile is passed over for the next one, and room (max_active_runs minus the
//     running count) is read from the newest counters. Every claimer locks owners in the same
//     order, DAGs before backfills, so claimers queue rather than deadlock.
//  2. For each owner, a walk takes its queued runs in claim order, up to least(room, limit), one
//     ordered index probe per step with FOR UPDATE SKIP LOCKED.
//  3. picked appends the backfills' runs after the DAGs' and stops at the claim's limit. Plans
//     run on demand, so the statement locks only the owners and runs it needs: a claim of one
//     run locks one owner and one run.
//  4. claimed leases the picked runs; the counter triggers move the owners' counters in the
//     same statement, under the locks taken in 1.
//
// Why it is written this way, each from a plan that went wrong:
//   - Every step has a constant LIMIT 1. With a LIMIT the planner cannot see (least(room,
//     limit)), it sorted every queued run of a 100,000-run backfill instead of reading the
//     index in order; and a plain scan of all claimable owners is estimated at all of them, a
//     cost that crossed jit_above_cost (4.8 s of JIT compilation in one claim). Recursive walks
//     are estimated at a few steps.
//   - The claim's limit is a subquery in picked, so that no estimate depends on a parameter:
//     otherwise a plan made for a known limit looks cheaper than the generic plan, and
//     PostgreSQL re-plans the statement on every execution instead of reusing the prepared one.
//   - The picked runs are updated by primary key (= ANY of an array), whatever the planner
//     thinks of the table's size.
func claimStatement(scope claimScope) string {
	dagOwner, backfillOwner := `manual_claimable`, `claimable`
	if scope == claimOneDag {
		// The DAG itself and its one active backfill. The condition on the backfill spells out
		// what `claimable` means so that the planner finds the backfill by dag_id instead of
		// walking backfills_claimable (a plan made while few backfills were claimable would
		// keep doing so when many are).
		dagOwner = `dag_id = $4::text AND manual_claimable`
		backfillOwner = `dag_id = $4::text AND state = 'running' AND num_queued > 0 AND num_running < max_active_runs`
	}
	return `
		WITH RECURSIVE dag_owner (dag_id, room) AS (
			SELECT * FROM (
				SELECT dag_id, max_active_runs - num_manual_running FROM dags
				WHERE ` + dagOwner + `
				ORDER BY dag_id LIMIT 1
				FOR NO KEY UPDATE) head
			UNION ALL
			SELECT d.* FROM dag_owner o CROSS JOIN LATERAL (
				SELECT dag_id, max_active_runs - num_manual_running FROM dags
				WHERE ` + dagOwner + ` AND dag_id > o.dag_id
				ORDER BY dag_id LIMIT 1
				FOR NO KEY UPDATE) d
		), manual_pick AS (
			SELECT w.id FROM dag_owner o CROSS JOIN LATERAL (
				WITH RECURSIVE walk (id, logical_date, n) AS (
					SELECT * FROM (
						SELECT id, logical_date, 1 FROM dag_runs
						WHERE dag_id = o.dag_id AND backfill_id IS NULL AND state = 'queued'
						ORDER BY logical_date LIMIT 1
						FOR UPDATE SKIP LOCKED) head
					UNION ALL
					SELECT r.id, r.logical_date, w.n + 1 FROM walk w CROSS JOIN LATERAL (
						SELECT id, logical_date FROM dag_runs
						WHERE dag_id = o.dag_id AND backfill_id IS NULL AND state = 'queued'
						  AND logical_date > w.logical_date
						ORDER BY logical_date LIMIT 1
						FOR UPDATE SKIP LOCKED) r
					WHERE w.n < least(o.room, $3::int)
				)
				SELECT id FROM walk) w
		), backfill_owner (id, room) AS (
			SELECT * FROM (
				SELECT id, max_active_runs - num_running FROM backfills
				WHERE ` + backfillOwner + `
				ORDER BY id LIMIT 1
				FOR NO KEY UPDATE) head
			UNION ALL
			SELECT b.* FROM backfill_owner o CROSS JOIN LATERAL (
				SELECT id, max_active_runs - num_running FROM backfills
				WHERE ` + backfillOwner + ` AND id > o.id
				ORDER BY id LIMIT 1
				FOR NO KEY UPDATE) b
		), backfill_pick AS (
			SELECT w.id FROM backfill_owner o CROSS JOIN LATERAL (
				WITH RECURSIVE walk (id, ordinal, n) AS (
					SELECT * FROM (
						SELECT id, backfill_sort_ordinal, 1 FROM dag_runs
						WHERE backfill_id = o.id AND state = 'queued'
						ORDER BY backfill_sort_ordinal LIMIT 1
						FOR UPDATE SKIP LOCKED) head
					UNION ALL
					SELECT r.id, r.backfill_sort_ordinal, w.n + 1 FROM walk w CROSS JOIN LATERAL (
						SELECT id, backfill_sort_ordinal FROM dag_runs
						WHERE backfill_id = o.id AND state = 'queued' AND backfill_sort_ordinal > w.ordinal
						ORDER BY backfill_sort_ordinal LIMIT 1
						FOR UPDATE SKIP LOCKED) r
					WHERE w.n < least(o.room, $3::int)
				)
				SELECT id FROM walk) w
		), picked AS (
			SELECT id FROM manual_pick
			UNION ALL
			SELECT id FROM backfill_pick
			LIMIT (SELECT $3::int)
		), claimed AS (
			UPDATE dag_runs r SET state = 'running', worker_id = $1::text, start_date = backfill_now(),
				end_date = NULL, lease_seconds = $2::int,
				lease_expires_at = backfill_now() + make_interval(secs => $2::int)
			WHERE r.id = ANY (ARRAY(SELECT id FROM picked))
			RETURNING r.*
		)
		SELECT ` + runColumns + ` FROM claimed
		ORDER BY backfill_id NULLS FIRST, dag_id, backfill_sort_ordinal, logical_date`
}

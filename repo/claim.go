package repo

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// RunClaimParams asks for queued runs to execute.
type RunClaimParams struct {
	WorkerID     string
	Limit        int
	LeaseSeconds int
	// DagID, when set, restricts the claim to one DAG.
	DagID *string
	// IdempotencyKey, when set, makes a retry of this claim answer the runs the first one
	// handed out that are still leased to the worker, instead of claiming more.
	IdempotencyKey string
	// Pool, when set, restricts the claim to the runs in one pool.
	Pool *string
	// KeyOnlyWithRuns records IdempotencyKey only when the claim hands out runs: a claim
	// that waits for work claims again under its key until it gets some, and an empty
	// attempt recorded under the key would answer every later one.
	KeyOnlyWithRuns bool
}

// RunClaim moves up to Limit queued runs to running, leased to the worker. Runs outside
// backfills come first (someone is waiting for them), DAGs in dag_id order, each DAG's runs by
// logical date; then backfills by effective priority (claim_priority.go), highest first, and
// oldest first within one, each in sort_ordinal order. It reports replayed =
// true when it answered from an earlier claim with the same idempotency key.
//
// The claim is one statement (claimStatement), so one round trip. Without a key it runs in
// its own implicit transaction; with one, in a transaction that records the key and the runs
// handed out, so that the key exists exactly when the lease does. It finds owners through the
// partial indexes of claimable owners (migrations/00005_fair_claims.sql), so idle, paused and
// saturated DAGs and backfills cost nothing, however many there are. Caps hold exactly under
// concurrent claims because each owner row is locked before its room is read and its runs are
// taken. A claimer never waits for an owner: one that another transaction holds (a concurrent
// claim, or a transaction holding it for seconds) is skipped for the next, so a held backfill
// delays no claim.
func (s *Store) RunClaim(ctx context.Context, p RunClaimParams) ([]Run, bool, error) {
	scope, args := claimAnyDag, []any{p.WorkerID, p.LeaseSeconds, p.Limit}
	if p.DagID != nil {
		scope, args = claimOneDag, append(args, *p.DagID)
	}
	if p.Pool != nil {
		scope, args = scope|claimInPool, append(args, *p.Pool)
	}
	args = append(args, s.priorityAging.Seconds()) // claimAgingParam
	var (
		claimed  []Run
		replayed bool
		err      error
	)
	if p.IdempotencyKey == "" {
		// The claim waits for no row lock (every lock it takes skips rows held elsewhere), so a
		// deadlock should not reach it; retrying one costs nothing if the planner ever locks in
		// another way.
		err = s.withRetry(ctx, func(a attempt) error {
			claimed, err = s.claimRuns(a.ctx, a.db, scope, args)
			return err
		})
	} else {
		claimed, replayed, err = s.runClaimIdempotent(ctx, p, scope, args)
	}
	if err != nil {
		return nil, false, err
	}
	if !replayed {
		s.observer.RunsClaimed(len(claimed))
	}
	if claimed == nil {
		claimed = []Run{}
	}
	return claimed, replayed, nil
}

// runClaimIdempotent claims under p's key (idempotent), or answers the runs an earlier claim
// with the key handed out that are still leased to the worker.
func (s *Store) runClaimIdempotent(ctx context.Context, p RunClaimParams, scope claimScope, args []any) ([]Run, bool, error) {
	keyless := p
	keyless.IdempotencyKey, keyless.KeyOnlyWithRuns = "", false
	fp, err := domain.RequestFingerprint(keyless, nil)
	if err != nil {
		return nil, false, err
	}
	r := idemRequest{key: p.IdempotencyKey, op: opClaim, fp: fp}
	s.prepareHot(ctx, claimStatements[scope])
	replay := func(ctx context.Context, q pgrun.Queryer, ids []int64) ([]Run, error) {
		var runs []Run
		err := sqlx.SelectContext(ctx, q, &runs, `
			SELECT `+runColumns+`, `+claimCodeRef+` FROM dag_runs
			WHERE id = ANY ($1) AND state = 'running' AND worker_id = $2
			ORDER BY backfill_id NULLS FIRST, dag_id, backfill_sort_ordinal, logical_date`,
			pq.Int64Array(ids), p.WorkerID)
		if err != nil {
			return nil, fmt.Errorf("replay claim: %w", err)
		}
		return runs, nil
	}
	return idempotent(ctx, s, r, replay, func(tx *sqlx.Tx) ([]Run, []int64, *string, error) {
		runs, err := s.claimRuns(ctx, tx, scope, args)
		if err != nil {
			return nil, nil, nil, err
		}
		// A claim that found nothing stores its key too. A claim skips owners that another
		// transaction holds, so a retry running while its first attempt still holds the owner
		// finds nothing: the key it records then either waits for the first attempt's key
		// (and answers its runs) or makes that attempt roll back. Without it, that retry
		// would answer nothing while the first leased runs to the worker.
		if len(runs) == 0 && p.KeyOnlyWithRuns {
			return runs, nil, nil, nil
		}
		ids := make([]int64, len(runs))
		for i, run := range runs {
			ids[i] = run.ID
		}
		return runs, ids, nil, nil
	})
}

// claimRaceBudget bounds how long a claim that came back empty is tried again while a
// claimable owner exists in its scope. Owners are locked SKIP LOCKED, so a claim that meets a
// backfill another claim holds for the millisecond its own statement takes passes it over; with
// every worker on one backfill, that would answer "nothing to do" while runs wait, and send
// workers into their idle backoff (or make an --until-idle executor stop early). Claims of one
// backfill take its row one after another, a few milliseconds each (tens on a loaded machine),
// so the budget covers a burst of them; a claim that meets an owner held for longer still gets
// its empty answer after the budget, well within LOCK_WAIT.
const (
	claimRaceBudget   = 500 * time.Millisecond
	claimRaceMaxDelay = 25 * time.Millisecond
)

// claimRuns runs the claim statement on q (the pool an attempt was handed, or a transaction),
// and again (within
// claimRaceBudget, with a short jittered backoff) while it hands out nothing although an
// owner in its scope is claimable. The claim is prepared once per pooled connection unless a
// transaction pooler sits in between (pgrun/prepared.go).
func (s *Store) claimRuns(ctx context.Context, q sqlx.QueryerContext, scope claimScope, args []any) ([]Run, error) {
	claim := claimStatements[scope]
	var deadline time.Time
	for attempt := 1; ; attempt++ {
		var claimed []Run
		if err := sqlx.SelectContext(ctx, s.hot(ctx, q, claim), &claimed, claim, args...); err != nil {
			return nil, fmt.Errorf("claim runs: %w", err)
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(claimRaceBudget)
		}
		if len(claimed) > 0 || time.Now().After(deadline) {
			return claimed, nil
		}
		var skipped bool
		claimable := claimableStatements[scope]
		if err := sqlx.GetContext(ctx, s.hot(ctx, q, claimable), &skipped, claimable, args[3:len(args)-1]...); err != nil {
			return nil, fmt.Errorf("claim runs: look for claimable owners: %w", err)
		}
		if !skipped {
			return claimed, nil
		}
		if err := sleepCtx(ctx, min(backoff(attempt), claimRaceMaxDelay, time.Until(deadline))); err != nil {
			return nil, fmt.Errorf("claim runs: %w", err)
		}
	}
}

// claimableStatement answers whether an owner of the scope is claimable in the statement's
// snapshot, without locking anything: after an empty claim, true means the claim passed it
// over because another transaction held it. Its parameters are the claim's filters ($1 the
// dag_id, else the pool).
func claimableStatement(scope claimScope) string {
	dagOwner, manualRun, backfillOwner := claimOwners(scope, 1)
	// A backfill counts only with a queued run that is neither deferred nor blocked: one
	// whose every queued run waits would keep an empty claim trying again for the whole race
	// budget. The counters tell blocked runs (notAllBlocked); deferred ones only the runs do.
	// So the runs are looked at only for a backfill with a run deferred past now (the
	// deferral index, usually empty): a look for its first ready run read every run before it
	// (a semi-join the planner made a sequential scan), 4 ms of PostgreSQL's CPU a claim
	// cycle on a backfill a third done, where the claim itself took 0.7 (P4).
	return `SELECT EXISTS (SELECT 1 FROM backfills WHERE ` + backfillOwner + ` AND ` + notAllBlocked + ` AND CASE
			WHEN NOT EXISTS (SELECT 1 FROM dag_runs WHERE not_before > backfill_now() AND backfill_id = backfills.id) THEN true
			ELSE EXISTS (SELECT 1 FROM dag_runs WHERE backfill_id = backfills.id AND blocked_by = 0 AND state = 'queued' AND ` + runReady + `) END)
		OR EXISTS (SELECT 1 FROM dags o WHERE ` + dagOwner + ` AND EXISTS (
			SELECT 1 FROM dag_runs WHERE ` + manualRun + `))`
}

// claimScope tells the forms of the claim statement apart: a bit set of filters.
type claimScope int

const (
	claimAnyDag claimScope = 0 // $1 worker_id, $2 lease_seconds, $3 limit
	claimOneDag claimScope = 1 // the same and $4 dag_id
	// claimInPool adds the pool after them ($4, or $5 after a dag_id). The claim's last
	// parameter, after every filter, is PRIORITY_AGING in seconds (claimAgingParam).
	claimInPool claimScope = 2
)

// textParam is the text of a query parameter of type text.
func textParam(n int) string { return "$" + strconv.Itoa(n) + "::text" }

// claimOwners is the conditions that make a DAG, a manual run and a backfill claimable in a
// scope; first is the number of the first filter parameter (the dag_id, else the pool).
func claimOwners(scope claimScope, first int) (dagOwner, manualRun, backfillOwner string) {
	dagOwner, backfillOwner = `manual_claimable`, `claimable`
	manualRun = `dag_id = o.dag_id AND backfill_id IS NULL AND state = 'queued' AND ` + runReady
	if scope&claimOneDag != 0 {
		// The DAG itself and its one active backfill. The condition on the backfill spells out
		// what `claimable` means so that the planner finds the backfill by dag_id instead of
		// walking backfills_claimable (a plan made while few backfills were claimable would
		// keep doing so when many are).
		dagOwner = `dag_id = ` + textParam(first) + ` AND manual_claimable`
		backfillOwner = `dag_id = ` + textParam(first) + ` AND state = 'running' AND num_queued > 0 AND num_running < max_active_runs`
	}
	// Pools: an owner or manual run whose pool is full in the statement's snapshot is passed
	// over, so that a full pool is skipped rather than filling the claim with runs it would
	// then drop. The snapshot may be stale either way; the exact check is poolRoom's, below.
	backfillOwner += ` AND (pool IS NULL OR EXISTS (SELECT 1 FROM pools p WHERE p.name = backfills.pool AND ` + poolOpen + `))`
	manualRun += ` AND (pool IS NULL OR EXISTS (SELECT 1 FROM pools p WHERE p.name = dag_runs.pool AND ` + poolOpen + `))`
	if scope&claimInPool != 0 {
		pool := textParam(first)
		if scope&claimOneDag != 0 {
			pool = textParam(first + 1)
		}
		backfillOwner += ` AND pool = ` + pool
		manualRun += ` AND pool = ` + pool
	}
	return dagOwner, manualRun, backfillOwner
}

// claimStatements and claimableStatements hold the texts for each scope, built once: the
// text is the key of its prepared statement, and building it costs more than a lookup. The
// claimable check runs after every empty claim, which workers sharing one backfill meet often.
var claimStatements, claimableStatements = func() (claim, claimable [claimOneDag | claimInPool + 1]string) {
	for scope := range claim {
		claim[scope] = claimStatement(claimScope(scope))
		claimable[scope] = claimableStatement(claimScope(scope))
	}
	return claim, claimable
}()

// claimStatement is the claim, in one statement. Its plan:
//
//  1. dag_owner and backfill_owner walk the claimable owners in claim order (DAGs by dag_id
//     along their partial index; backfills in backfill_rank's order, claim_priority.go, which
//     ranks the backfills of backfills_claimable once), one owner per step, and lock each owner row as it is
//     reached, FOR NO KEY UPDATE SKIP LOCKED: an owner locked by anyone else is passed over
//     for the next one instead of waited on, so a transaction that holds a backfill row for
//     seconds parks no claim inside the database. An owner that is locked is read at its
//     newest row version (READ COMMITTED re-evaluates the WHERE clause on it), so room
//     (max_active_runs minus the running count) comes from the newest counters. Since no
//     claimer waits for an owner, claimers cannot deadlock over owners.
//  2. For each owner, a walk takes its queued runs in claim order, up to least(room, limit), one
//     ordered index probe per step with FOR UPDATE SKIP LOCKED. Only runs that wait for no
//     other (blocked_by = 0, a range of dag_runs_unfinished_by_backfill of its own,
//     migrations/00035) are walked: a member of a group whose runs are blocked costs one probe.
//  3. picked appends the backfills' runs after the DAGs' and stops at the claim's limit. Plans
//     run on demand, so the statement locks only the owners and runs it needs: a claim of one
//     run locks one owner and one run.
//  4. Pools: numbered keeps picked's claim order, pool_room locks the picked runs' pools in
//     name order with FOR NO KEY UPDATE SKIP LOCKED, and admitted keeps, of each pool's runs,
//     as many as its room allows, in claim order. The lock re-reads a pool at its newest
//     version, as 1 does for owners, and every claim that adds to a pool holds that lock until
//     it commits, so the room read is exact; a pool another claimer holds is skipped, not
//     waited on. Pools are taken last, after every owner and run: a claim never waits while
//     it holds a pool, so it cannot deadlock with a report that holds a backfill and waits
//     for the pool's counter.
//     A paced pool's room is also bounded by the starts its pace leaves (poolRoom), and
//     paced appends the admitted runs' start times to the pool's log of starts under that
//     same lock, so the pace holds across claimers and replicas as exactly as the slots do.
//  5. claimed leases the admitted runs; the counter triggers move the owners' and pools'
//     counters in the same statement, under the locks taken in 1 and 4.
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
//   - A step reads the ranked ids through a subquery ordered by rank, so the planner knows
//     its rows come in rank order and joins them to backfills lazily, stopping at the first
//     it can lock. Joined to the ranked CTE directly, every step joined and sorted every
//     claimable backfill again to find the next: a claim of two runs among 1,001 claimable
//     backfills read 3,002 backfill rows instead of 1,003 (TestClaimPlanReadsOnlyClaimableOwners).
//   - The picked runs are updated by primary key (= ANY of an array), whatever the planner
//     thinks of the table's size.
func claimStatement(scope claimScope) string {
	dagOwner, manualRun, backfillOwner := claimOwners(scope, 4)
	aging := claimAgingParam(scope)
	return `
		WITH RECURSIVE dag_owner (dag_id, room) AS (
			SELECT * FROM (
				SELECT dag_id, max_active_runs - num_manual_running FROM dags
				WHERE ` + dagOwner + `
				ORDER BY dag_id LIMIT 1
				FOR NO KEY UPDATE SKIP LOCKED) head
			UNION ALL
			SELECT d.* FROM dag_owner o CROSS JOIN LATERAL (
				SELECT dag_id, max_active_runs - num_manual_running FROM dags
				WHERE ` + dagOwner + ` AND dag_id > o.dag_id
				ORDER BY dag_id LIMIT 1
				FOR NO KEY UPDATE SKIP LOCKED) d
		), manual_pick AS (
			SELECT w.id, w.pool FROM dag_owner o CROSS JOIN LATERAL (
				WITH RECURSIVE walk (id, logical_date, pool, n) AS (
					SELECT * FROM (
						SELECT id, logical_date, pool, 1 FROM dag_runs
						WHERE ` + manualRun + `
						ORDER BY logical_date LIMIT 1
						FOR UPDATE SKIP LOCKED) head
					UNION ALL
					SELECT r.id, r.logical_date, r.pool, w.n + 1 FROM walk w CROSS JOIN LATERAL (
						SELECT id, logical_date, pool FROM dag_runs
						WHERE ` + manualRun + `
						  AND logical_date > w.logical_date
						ORDER BY logical_date LIMIT 1
						FOR UPDATE SKIP LOCKED) r
					WHERE w.n < least(o.room, $3::int)
				)
				SELECT id, pool FROM walk) w
		), backfill_rank AS MATERIALIZED (
			SELECT id, row_number() OVER (ORDER BY ` + backfillRankOrder(aging) + `) AS k FROM backfills
			WHERE ` + backfillOwner + ` AND ` + notAllBlocked + `
		), backfill_owner (k, id, room, pool, pool_room) AS (
			SELECT * FROM (
				SELECT r.k, backfills.id, max_active_runs - num_running, pool, ` + snapshotPoolRoom + `
				FROM (SELECT id, k FROM backfill_rank ORDER BY k) r
					JOIN backfills ON backfills.id = r.id
				WHERE ` + backfillOwner + `
				ORDER BY r.k LIMIT 1
				FOR NO KEY UPDATE OF backfills SKIP LOCKED) head
			UNION ALL
			SELECT b.* FROM backfill_owner o CROSS JOIN LATERAL (
				SELECT r.k, backfills.id, max_active_runs - num_running, pool, ` + snapshotPoolRoom + `
				FROM (SELECT id, k FROM backfill_rank WHERE k > o.k ORDER BY k) r
					JOIN backfills ON backfills.id = r.id
				WHERE ` + backfillOwner + `
				ORDER BY r.k LIMIT 1
				FOR NO KEY UPDATE OF backfills SKIP LOCKED) b
		), backfill_pick AS (
			SELECT w.id, o.pool FROM backfill_owner o CROSS JOIN LATERAL (
				WITH RECURSIVE walk (id, ordinal, n) AS (
					SELECT * FROM (
						SELECT id, backfill_sort_ordinal, 1 FROM dag_runs
						WHERE backfill_id = o.id AND blocked_by = 0 AND state = 'queued' AND ` + runReady + `
						ORDER BY backfill_sort_ordinal LIMIT 1
						FOR UPDATE SKIP LOCKED) head
					UNION ALL
					SELECT r.id, r.backfill_sort_ordinal, w.n + 1 FROM walk w CROSS JOIN LATERAL (
						SELECT id, backfill_sort_ordinal FROM dag_runs
						WHERE backfill_id = o.id AND blocked_by = 0 AND state = 'queued' AND ` + runReady + ` AND backfill_sort_ordinal > w.ordinal
						ORDER BY backfill_sort_ordinal LIMIT 1
						FOR UPDATE SKIP LOCKED) r
					WHERE w.n < least(o.room, o.pool_room, $3::int)
				)
				SELECT id FROM walk) w
		), picked AS (
			SELECT id, pool FROM manual_pick
			UNION ALL
			SELECT id, pool FROM backfill_pick
			LIMIT (SELECT $3::int)
		), numbered AS MATERIALIZED (
			SELECT id, pool, row_number() OVER () AS ord FROM picked
		), pool_room AS (
			SELECT name, ` + poolRoom + ` AS room FROM pools p
			WHERE name IN (SELECT pool FROM numbered) AND num_running < slots
			ORDER BY name
			FOR NO KEY UPDATE SKIP LOCKED
		), admitted AS (
			SELECT id, NULL AS pool FROM numbered WHERE pool IS NULL
			UNION ALL
			SELECT id, pool FROM (
				SELECT n.id, n.pool, pr.room, row_number() OVER (PARTITION BY n.pool ORDER BY n.ord) AS k
				FROM numbered n JOIN pool_room pr ON pr.name = n.pool) q
			WHERE k <= room
		), paced AS (
			UPDATE pools p SET rate_starts = ARRAY(
					SELECT s FROM unnest(p.rate_starts) s WHERE s > backfill_now() - pool_rate_period(p.rate_per))
				|| array_fill(backfill_now(), ARRAY[a.n])
			FROM (SELECT pool, count(*)::int AS n FROM admitted WHERE pool IS NOT NULL GROUP BY pool) a
			WHERE p.name = a.pool AND p.rate_runs IS NOT NULL
		), claimed AS (
			UPDATE dag_runs r SET state = 'running', worker_id = $1::text, start_date = backfill_now(),
				end_date = NULL, lease_seconds = $2::int,
				lease_expires_at = backfill_now() + make_interval(secs => $2::int)
			WHERE r.id = ANY (ARRAY(SELECT id FROM admitted))
			RETURNING r.*
		)
		SELECT ` + runColumns + `, ` + claimCodeRef + ` FROM claimed
		ORDER BY backfill_id NULLS FIRST, dag_id, backfill_sort_ordinal, logical_date`
}

// notAllBlocked keeps out of the ranking a backfill whose every queued run waits for another
// (a group's member, num_blocked): a filter on the rows backfills_claimable finds, not part of
// its predicate, so that the counters stay out of every index and their updates stay HOT. The
// walk does not repeat it on the row it locks: a member that became blocked meanwhile costs
// one probe of an empty range.
const notAllBlocked = `num_queued > num_blocked`

// runReady is the condition on a queued run that no deferral holds back (migrations/00025):
// by the one clock, so the deferral ends at the same instant on every replica.
const runReady = `(not_before IS NULL OR not_before <= backfill_now())`

// snapshotPoolRoom is an owner's pool room as the statement's snapshot has it (NULL for no
// pool, which least() ignores): it keeps the claim from taking more of a pooled backfill's
// runs than the pool could admit. It is only a first guess; poolRoom decides.
const snapshotPoolRoom = `(SELECT ` + poolRoom + ` FROM pools p WHERE p.name = backfills.pool)`

// poolRoom is how many runs pool p may start now: its free slots, and no more than its pace
// leaves (migrations/00026_pool_rate.sql). On the row the claim locks it is exact; elsewhere,
// a snapshot's guess.
const poolRoom = `least(p.slots - p.num_running, coalesce(pool_rate_room(p.rate_runs, p.rate_per, p.rate_starts, backfill_now()), p.slots))`

// poolOpen is the snapshot's test that pool p has room: a pool that is full or out of starts
// is passed over, not filled into the claim and dropped.
const poolOpen = `p.num_running < p.slots AND (p.rate_runs IS NULL OR pool_rate_room(p.rate_runs, p.rate_per, p.rate_starts, backfill_now()) > 0)`

// claimCodeRef is the code_ref a claimed run is answered with: its backfill's, read by primary
// key (the claim holds that row already), so that no run row carries a copy. The alias lets
// TestClaimPlanReadsOnlyClaimableOwners tell this read (one row per claimed run) from the
// owners' scans.
const claimCodeRef = `(SELECT code_ref_of.code_ref FROM backfills code_ref_of WHERE code_ref_of.id = backfill_id) AS code_ref`

package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// opGroup is the idempotency keys' operation of a group's creation.
const opGroup = "backfill_group"

// groupPlan is a group request planned outside the creating transaction: the graph and each
// member's slots. The transaction settles the slots against the runs it sees and writes.
type groupPlan struct {
	graph groupGraph
	slots [][]domain.PlannedSlot // per member, in graph.members order
	now   time.Time
}

// planGroup reads the graph and plans every member's slots, answering what is wrong with the
// request itself (404, 422) before anything else.
func (s *Store) planGroup(ctx context.Context, p domain.GroupRequest) (groupPlan, error) {
	var plan groupPlan
	err := s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) error {
		g, err := readGroupGraph(ctx, q, p.DagIDs, p.IncludeDownstream)
		if err != nil {
			return err
		}
		now, err := dbNow(ctx, q)
		plan = groupPlan{graph: g, now: now}
		return err
	})
	if err != nil {
		return groupPlan{}, err
	}
	total := 0
	planned := make(map[string][]domain.PlannedSlot, len(plan.graph.members))
	var kept []string
	for _, d := range plan.graph.members {
		slots, err := s.planSlots(d, p.Member(d.DagID, 0, 0), plan.now)
		if err != nil {
			return groupPlan{}, fmt.Errorf("%s: %w", d.DagID, err)
		}
		total += len(slots)
		planned[d.DagID] = slots
		if len(slots) > 0 {
			kept = append(kept, d.DagID)
		}
	}
	if len(kept) < len(plan.graph.members) && len(kept) > 0 {
		// A DAG whose schedule has no slot in the window (a weekly DAG in a window of days)
		// has nothing to run: it is no member, and its dependents wait, through it, for the
		// members above it.
		slices.Sort(kept)
		if err := plan.graph.keep(kept); err != nil {
			return groupPlan{}, err
		}
	}
	for _, d := range plan.graph.members {
		plan.slots = append(plan.slots, planned[d.DagID])
	}
	if total > s.maxBackfillRuns {
		// MAX_BACKFILL_RUNS counts the group's runs, all members together.
		return groupPlan{}, &domain.TooManyRunsError{Slots: total, Exact: true, MaxRuns: s.maxBackfillRuns}
	}
	if total == 0 {
		return groupPlan{}, fmt.Errorf("%w: no member's schedule has a tick in the window that has ended", ErrNoRunsToCreate)
	}
	return plan, nil
}

// BackfillGroupCreate creates a group, a member backfill per DAG, every run and every
// run-to-run dependency in one SERIALIZABLE transaction, retried whole. It reports replayed =
// true when an earlier request with the same idempotency key created it.
func (s *Store) BackfillGroupCreate(ctx context.Context, p domain.GroupRequest) (BackfillGroup, bool, error) {
	defer s.eventsMayBeWritten()
	fp, err := p.Fingerprint()
	if err != nil {
		return BackfillGroup{}, false, err
	}
	key := idemRequest{key: p.IdempotencyKey, op: opGroup, fp: fp}
	if g, ok, err := s.groupReplay(ctx, key); err != nil || ok {
		return g, ok, err
	}
	plan, err := s.planGroup(ctx, p)
	if err != nil {
		return BackfillGroup{}, false, err
	}
	for range maxCreatePasses {
		// A fast refusal listing every conflict; inside the transaction the unique index is
		// the arbiter (a member's insert fails, and this look tells the client why).
		if err := s.groupConflicts(ctx, plan); err != nil {
			if g, ok, rerr := s.groupReplay(ctx, key); rerr != nil || ok {
				return g, ok, rerr
			}
			return BackfillGroup{}, false, err
		}
		var g BackfillGroup
		err := s.withRetry(ctx, func(a attempt) error {
			known := make([]runDates, len(plan.graph.members))
			for i, d := range plan.graph.members {
				var err error
				if known[i], err = s.existingRunDates(a.ctx, a.db, d.DagID, plan.slots[i]); err != nil {
					return err
				}
			}
			return s.runTx(ctx, sql.LevelSerializable, a, func(tx *sqlx.Tx) error {
				var err error
				g, err = s.groupInsertAll(ctx, tx, p, key, plan, known)
				return err
			})
		})
		switch {
		case err == nil:
			for range g.Members {
				s.observer.BackfillCreated(string(domain.BackfillRunning))
			}
			return g, false, nil
		case errors.Is(err, errIdempotencyKeyTaken):
			if g, ok, err := s.groupReplay(ctx, key); err != nil || ok {
				return g, ok, err
			}
		case errors.Is(err, errBackfillUniqueViolation):
			// A member's DAG got an active backfill in between: the next pass lists it.
		default:
			return BackfillGroup{}, false, err
		}
	}
	return BackfillGroup{}, false, fmt.Errorf("%w: the members' active backfills kept changing", ErrRetriesExhausted)
}

// groupReplay answers a request whose key is stored: the group as it is now when the request
// is the same, ErrIdempotencyKeyReused when it differs.
func (s *Store) groupReplay(ctx context.Context, r idemRequest) (BackfillGroup, bool, error) {
	if r.key == "" {
		return BackfillGroup{}, false, nil
	}
	ids, found, err := readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]int64, bool, error) { return idemLookup(ctx, q, r) })
	if err != nil || !found {
		return BackfillGroup{}, false, err
	}
	if len(ids) != 1 {
		return BackfillGroup{}, false, fmt.Errorf("idempotency key %q names %d groups", r.key, len(ids))
	}
	g, err := idemReplay(ctx, s, ids, func(ctx context.Context, q pgrun.Queryer, ids []int64) (BackfillGroup, error) {
		return groupGet(ctx, q, ids[0], "")
	})
	return g, err == nil, err
}

// groupConflicts answers a *BackfillAlreadyRunningError listing every member DAG that has an
// active backfill, or nil.
func (s *Store) groupConflicts(ctx context.Context, plan groupPlan) error {
	ids := make(pq.StringArray, len(plan.graph.members))
	for i, d := range plan.graph.members {
		ids[i] = d.DagID
	}
	conflicts, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]GroupConflict, error) {
		var rows []struct {
			DagID string `db:"dag_id"`
			ID    int64  `db:"id"`
		}
		err := sqlx.SelectContext(ctx, q, &rows, `SELECT dag_id, id FROM backfills
			WHERE dag_id = ANY ($1) AND state IN `+activeStatesSQL+` ORDER BY dag_id`, ids)
		out := make([]GroupConflict, len(rows))
		for i, r := range rows {
			out[i] = GroupConflict{DagID: r.DagID, ActiveBackfillID: r.ID}
		}
		return out, err
	})
	if err != nil {
		return fmt.Errorf("find active backfills of the group's DAGs: %w", err)
	}
	if len(conflicts) == 0 {
		return nil
	}
	return &BackfillAlreadyRunningError{ActiveBackfillID: conflicts[0].ActiveBackfillID, Conflicts: conflicts}
}

// groupInsertAll is the body of the creating transaction: the group's row, each member
// backfill as a plain creation writes it (backfillInsertAll: its runs, its slot rows and its
// row last), in depth order so that the members' ids follow the graph, then the run-to-run
// dependencies among the runs the members settled on, and the group's plan digest.
func (s *Store) groupInsertAll(ctx context.Context, tx *sqlx.Tx, p domain.GroupRequest, key idemRequest, plan groupPlan, known []runDates) (BackfillGroup, error) {
	var id int64
	if err := sqlx.GetContext(ctx, tx, &id, `SELECT nextval(pg_get_serial_sequence('backfill_groups', 'id'))`); err != nil {
		return BackfillGroup{}, fmt.Errorf("allocate group id: %w", err)
	}
	if key.key != "" {
		if err := idemRecord(ctx, tx, key, []int64{id}, nil); err != nil {
			return BackfillGroup{}, err
		}
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO backfill_groups (id, dag_ids, include_downstream, from_date, to_date, run_backwards,
			dag_run_conf, reprocess_behavior, max_active_runs, max_failed_runs, description, pool, priority,
			code_ref, created_by, reason, state, plan_hash, num_dependencies, created_at, updated_at)
		OVERRIDING SYSTEM VALUE
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, 'running', '', 0,
			backfill_now(), backfill_now())`,
		id, pq.StringArray(p.DagIDs), p.IncludeDownstream, p.FromDate, p.ToDate, p.RunBackwards,
		JSON(p.DagRunConf), p.ReprocessBehavior, p.MaxActiveRuns, p.MaxFailedRuns, p.Description, p.Pool,
		p.Priority, p.CodeRef, p.CreatedBy, p.Reason)
	if err != nil {
		return BackfillGroup{}, fmt.Errorf("insert backfill group: %w", err)
	}
	members, err := s.groupMemberPlans(ctx, tx, plan)
	if err != nil {
		return BackfillGroup{}, err
	}
	graph := plan.edgeGraph()
	hashes := make([]domain.GroupMemberPlanHash, len(plan.graph.members))
	for i, d := range plan.graph.members {
		// Each run is written with what it waits for of the members above it, settled
		// before it (depth order): no second write of the runs that wait.
		waits, err := domain.WaitsOnUpstreams(members, i, plan.graph.links, graph)
		if err != nil {
			return BackfillGroup{}, err
		}
		for k := range members[i].Slots {
			members[i].Slots[k].BlockedBy = waits[k]
		}
		depth := plan.graph.depth[d.DagID]
		b, slots, err := s.backfillInsertAll(ctx, tx, p.Member(d.DagID, id, depth), domain.Fingerprint{}, d, members[i].Slots, known[i])
		if errors.Is(err, ErrNoRunsToCreate) {
			return BackfillGroup{}, fmt.Errorf("%w: %s has no schedule tick in the window that has ended", ErrNoRunsToCreate, d.DagID)
		}
		if err != nil {
			return BackfillGroup{}, err
		}
		members[i].Slots = slots
		hashes[i] = domain.GroupMemberPlanHash{DagID: d.DagID, Depth: depth, PlanHash: deref(b.PlanHash)}
	}
	deps, err := domain.PlanGroupEdges(members, plan.graph.links, graph, s.maxDependencies)
	if err != nil {
		return BackfillGroup{}, err
	}
	if err := insertDependencies(ctx, tx, id, plan.graph.members, deps.Edges); err != nil {
		return BackfillGroup{}, err
	}
	if err := correctBlocked(ctx, tx, plan.graph.members, members, deps.Edges); err != nil {
		return BackfillGroup{}, err
	}
	planHash := domain.GroupPlanHash(hashes, deps.Edges.Len())
	if p.IfMatch != nil && !slices.Contains(p.IfMatch, planHash) {
		return BackfillGroup{}, &domain.PlanChangedError{CurrentPlanHash: planHash}
	}
	_, err = tx.ExecContext(ctx, `UPDATE backfill_groups SET plan_hash = $2, num_dependencies = $3 WHERE id = $1`,
		id, planHash, deps.Edges.Len())
	if err != nil {
		return BackfillGroup{}, fmt.Errorf("record the group's plan: %w", err)
	}
	return groupGet(ctx, tx, id, "")
}

// groupMemberPlans answers each member's plan as made before the transaction (its slots
// cloned: settling mutates them), with the runs in flight outside any backfill of the
// members that others wait for (or that wait for their own past), read on q.
func (s *Store) groupMemberPlans(ctx context.Context, q sqlx.QueryerContext, plan groupPlan) ([]domain.GroupMemberPlan, error) {
	waitedFor := map[string]bool{}
	for _, d := range plan.graph.members {
		for _, l := range plan.graph.links[d.DagID] {
			waitedFor[l.Ancestor] = true
		}
		if plan.graph.nodes[d.DagID].DependsOnPast {
			waitedFor[d.DagID] = true
		}
	}
	members := make([]domain.GroupMemberPlan, len(plan.graph.members))
	for i, d := range plan.graph.members {
		members[i] = domain.GroupMemberPlan{DagID: d.DagID, Slots: slices.Clone(plan.slots[i]),
			DependsOnPast: plan.graph.nodes[d.DagID].DependsOnPast}
		if waitedFor[d.DagID] {
			var err error
			if members[i].InFlight, err = inFlightOutsideBackfills(ctx, q, d.DagID); err != nil {
				return nil, err
			}
		}
	}
	return members, nil
}

// edgeGraph is what following the plan's links needs: the schedules, the window all the
// members' slots span, and the plan's now.
func (plan groupPlan) edgeGraph() domain.GroupGraph {
	first, last := plan.now, time.Time{}
	for _, slots := range plan.slots {
		if len(slots) > 0 {
			f, l := domain.Window(slots)
			first, last = minTime(first, f), maxTime(last, l)
		}
	}
	return domain.GroupGraph{Schedules: plan.graph.schedules, From: first, To: last, Now: plan.now}
}

// correctBlocked sets blocked_by where the dependencies of the settled plan count other than
// what a run was written with (a member that depends on its own past: those edges need its
// settled plan), in one statement; usually there is none. The counter trigger moves
// num_blocked with it.
func correctBlocked(ctx context.Context, tx *sqlx.Tx, dags []Dag, members []domain.GroupMemberPlan, e domain.GroupEdges) error {
	type run struct {
		member int32
		date   int64
	}
	count := make(map[run]int, e.Len())
	for i := range e.Child {
		count[run{e.Child[i], e.ChildDate[i].UnixMicro()}]++
	}
	var dagIDs, dates pq.StringArray
	var blocked pq.Int64Array
	for mi, m := range members {
		for _, sl := range m.Slots {
			if sl.Action == domain.ActionSkip {
				continue
			}
			if n := count[run{int32(mi), sl.LogicalDate.UnixMicro()}]; n != sl.BlockedBy {
				dagIDs = append(dagIDs, dags[mi].DagID)
				dates = append(dates, sl.LogicalDate.Format(time.RFC3339Nano))
				blocked = append(blocked, int64(n))
			}
		}
	}
	if len(dagIDs) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `
		UPDATE dag_runs r SET blocked_by = c.blocked
		FROM unnest($1::text[], $2::timestamptz[], $3::int[]) AS c (dag_id, logical_date, blocked)
		WHERE r.dag_id = c.dag_id AND r.logical_date = c.logical_date`, dagIDs, dates, blocked)
	if err != nil {
		return fmt.Errorf("set what the runs wait for: %w", err)
	}
	return nil
}

// insertDependencies writes a group's dependencies in one statement: the runs on both sides
// are found by DAG and logical date (the members' runs were inserted or taken over earlier in
// the transaction; the others are in flight). The runs were written with their blocked_by.
func insertDependencies(ctx context.Context, tx *sqlx.Tx, groupID int64, dags []Dag, e domain.GroupEdges) error {
	if e.Len() == 0 {
		return nil
	}
	ids := make(pq.StringArray, len(dags))
	for i, d := range dags {
		ids[i] = d.DagID
	}
	child, up := make(pq.Int32Array, e.Len()), make(pq.Int32Array, e.Len())
	childDate, upDate := make(pq.StringArray, e.Len()), make(pq.StringArray, e.Len())
	for i := range e.Child {
		child[i], up[i] = e.Child[i]+1, e.Up[i]+1 // SQL arrays count from 1
		childDate[i] = e.ChildDate[i].Format(time.RFC3339Nano)
		upDate[i] = e.UpDate[i].Format(time.RFC3339Nano)
	}
	var written int
	err := sqlx.GetContext(ctx, tx, &written, `
		WITH edge AS (
			SELECT c.id AS run_id, u.id AS upstream_run_id
			FROM unnest($2::int[], $3::timestamptz[], $4::int[], $5::timestamptz[]) AS x (child, child_date, up, up_date)
			JOIN dag_runs c ON c.dag_id = ($1::text[])[x.child] AND c.logical_date = x.child_date
			JOIN dag_runs u ON u.dag_id = ($1::text[])[x.up] AND u.logical_date = x.up_date
		), written AS (
			INSERT INTO dag_run_dependencies (upstream_run_id, run_id, group_id)
			SELECT upstream_run_id, run_id, $6 FROM edge
			RETURNING run_id
		)
		SELECT count(*) FROM written`,
		ids, child, childDate, up, upDate, groupID)
	if err != nil {
		return fmt.Errorf("write run dependencies: %w", err)
	}
	if written != e.Len() {
		// A run the plan waits for is not there in this snapshot (one in flight ended in
		// between): plan again from a fresh look.
		return fmt.Errorf("%w: %d of %d dependencies found their runs", errConcurrentRunForDate, written, e.Len())
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

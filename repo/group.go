package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// BackfillGroup is one lifecycle over several DAGs and one window: a member backfill per DAG,
// whose runs wait for each other (contract: "Backfilling a pipeline").
type BackfillGroup struct {
	ID                int64                    `db:"id"`
	DagIDs            pq.StringArray           `db:"dag_ids"`
	IncludeDownstream domain.IncludeDownstream `db:"include_downstream"`
	FromDate          time.Time                `db:"from_date"`
	ToDate            time.Time                `db:"to_date"`
	RunBackwards      bool                     `db:"run_backwards"`
	DagRunConf        JSON                     `db:"dag_run_conf"`
	ReprocessBehavior domain.ReprocessBehavior `db:"reprocess_behavior"`
	MaxActiveRuns     int                      `db:"max_active_runs"`
	MaxFailedRuns     *int                     `db:"max_failed_runs"`
	Description       *string                  `db:"description"`
	Pool              *string                  `db:"pool"`
	Priority          int                      `db:"priority"`
	CodeRef           *string                  `db:"code_ref"`
	CreatedBy         *string                  `db:"created_by"`
	Reason            *string                  `db:"reason"`
	State             domain.BackfillState     `db:"state"`
	PauseReason       *domain.PauseReason      `db:"pause_reason"`
	PlanHash          string                   `db:"plan_hash"`
	Dependencies      int64                    `db:"num_dependencies"`
	CreatedAt         time.Time                `db:"created_at"`
	UpdatedAt         time.Time                `db:"updated_at"`
	CompletedAt       *time.Time               `db:"completed_at"`
	// Members are the member backfills, by depth then dag_id.
	Members []GroupMember `db:"-"`
}

// Progress sums the members' progress.
func (g BackfillGroup) Progress() Progress {
	var p Progress
	for _, m := range g.Members {
		p.Queued += m.Queued
		p.Running += m.Running
		p.Success += m.Success
		p.Failed += m.Failed
		p.Canceled += m.Canceled
		p.Skipped += m.Skipped
		p.Blocked += m.Blocked
	}
	return p
}

// GroupMember is one member backfill of a group.
type GroupMember struct {
	GroupID    int64                `db:"group_id"`
	DagID      string               `db:"dag_id"`
	BackfillID int64                `db:"id"`
	Depth      int                  `db:"group_depth"`
	State      domain.BackfillState `db:"state"`
	Progress
}

const groupColumns = `id, dag_ids, include_downstream, from_date, to_date, run_backwards, dag_run_conf,
	reprocess_behavior, max_active_runs, max_failed_runs, description, pool, priority, code_ref, created_by,
	reason, state, pause_reason, plan_hash, num_dependencies, created_at, updated_at, completed_at`

const groupMemberColumns = `group_id, dag_id, id, group_depth, state,
	num_queued, num_running, num_success, num_failed, num_canceled, num_skipped, num_blocked`

// BackfillGroupGet reads a group with its members.
func (s *Store) BackfillGroupGet(ctx context.Context, id int64) (BackfillGroup, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (BackfillGroup, error) {
		return groupGet(ctx, q, id, "")
	})
}

// groupGet reads a group and its members on q; lock, when set, locks the group's row.
func groupGet(ctx context.Context, q sqlx.QueryerContext, id int64, lock string) (BackfillGroup, error) {
	var g BackfillGroup
	err := sqlx.GetContext(ctx, q, &g, `SELECT `+groupColumns+` FROM backfill_groups WHERE id = $1 `+lock, id)
	if isNoRows(err) {
		return BackfillGroup{}, ErrGroupNotFound
	}
	if err != nil {
		return BackfillGroup{}, fmt.Errorf("get backfill group %d: %w", id, err)
	}
	groups := []BackfillGroup{g}
	if err := withMembers(ctx, q, groups); err != nil {
		return BackfillGroup{}, err
	}
	return groups[0], nil
}

// withMembers reads the members of groups, in one statement, into each group.
func withMembers(ctx context.Context, q sqlx.QueryerContext, groups []BackfillGroup) error {
	if len(groups) == 0 {
		return nil
	}
	ids := make(pq.Int64Array, len(groups))
	at := make(map[int64]int, len(groups))
	for i, g := range groups {
		ids[i], at[g.ID] = g.ID, i
	}
	var members []GroupMember
	err := sqlx.SelectContext(ctx, q, &members, `SELECT `+groupMemberColumns+` FROM backfills
		WHERE group_id = ANY ($1) ORDER BY group_id, group_depth, dag_id`, ids)
	if err != nil {
		return fmt.Errorf("read members of backfill groups: %w", err)
	}
	for _, m := range members {
		g := &groups[at[m.GroupID]]
		g.Members = append(g.Members, m)
	}
	return nil
}

// BackfillGroupListParams filters and pages groups.
type BackfillGroupListParams struct {
	// State keeps the groups in this state; DagID those with a member of this DAG.
	State *string
	DagID *string
	ListParams
}

// BackfillGroupList pages groups by id, with their members.
func (s *Store) BackfillGroupList(ctx context.Context, p BackfillGroupListParams) ([]BackfillGroup, int, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]BackfillGroup, int, error) {
		var total int
		if err := sqlx.GetContext(ctx, q, &total, `SELECT count(*)`+groupListFilter, p.State, p.DagID); err != nil {
			return nil, 0, fmt.Errorf("count backfill groups: %w", err)
		}
		groups := []BackfillGroup{}
		err := sqlx.SelectContext(ctx, q, &groups, `SELECT `+groupColumns+groupListFilter+`
			AND ($5::text IS NULL OR id > $5::bigint) ORDER BY id LIMIT $3 OFFSET $4`,
			p.State, p.DagID, p.Limit, p.Offset, p.After)
		if err != nil {
			return nil, 0, fmt.Errorf("list backfill groups: %w", err)
		}
		return groups, total, withMembers(ctx, q, groups)
	})
}

// groupListFilter is BackfillGroupList's FROM and WHERE, for its count and its page.
const groupListFilter = ` FROM backfill_groups g
	WHERE ($1::text IS NULL OR state = $1)
	  AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM backfills b WHERE b.group_id = g.id AND b.dag_id = $2))`

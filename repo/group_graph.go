package repo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/schedule"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// groupGraph is what a group's plan is made from: its members, by depth then dag_id, and
// every DAG upstream of them, with their dependencies and schedules.
type groupGraph struct {
	members   []Dag
	depth     map[string]int
	links     map[string][]domain.Link
	nodes     map[string]domain.DagNode
	schedules map[string]*schedule.Schedule
	byID      map[string]Dag // every DAG read, members and those upstream of them
}

// includeDepth is how far downstream of the targets a group reaches.
func includeDepth(include domain.IncludeDownstream) int {
	switch include {
	case domain.IncludeDirect:
		return 1
	case domain.IncludeAll:
		return 1 << 20
	}
	return 0
}

// readGroupGraph reads the members of a group request (the targets, and the DAGs downstream
// of them as include_downstream says) and every DAG upstream of a member, in three
// statements whatever the graph's size. An unknown target is ErrDagNotFound.
func readGroupGraph(ctx context.Context, q sqlx.QueryerContext, targets []string, include domain.IncludeDownstream) (groupGraph, error) {
	var memberIDs []string
	err := sqlx.SelectContext(ctx, q, &memberIDs, `
		WITH RECURSIVE down (dag_id, depth) AS (
			SELECT unnest($1::text[]), 0
			UNION
			SELECT d.dag_id, down.depth + 1 FROM dag_dependencies d JOIN down ON d.upstream_dag_id = down.dag_id
			WHERE down.depth < $2
		)
		SELECT DISTINCT dag_id FROM down ORDER BY dag_id`, pq.StringArray(targets), includeDepth(include))
	if err != nil {
		return groupGraph{}, fmt.Errorf("read the group's members: %w", err)
	}
	var dags []Dag
	err = sqlx.SelectContext(ctx, q, &dags, `
		WITH RECURSIVE up (dag_id) AS (
			SELECT unnest($1::text[])
			UNION
			SELECT d.upstream_dag_id FROM dag_dependencies d JOIN up ON d.dag_id = up.dag_id
		)
		SELECT `+dagColumns+` FROM dags WHERE dag_id IN (SELECT dag_id FROM up) ORDER BY dag_id`, pq.StringArray(memberIDs))
	if err != nil {
		return groupGraph{}, fmt.Errorf("read the group's DAGs: %w", err)
	}
	byID := make(map[string]Dag, len(dags))
	for _, d := range dags {
		byID[d.DagID] = d
	}
	for _, t := range targets {
		if _, ok := byID[t]; !ok {
			return groupGraph{}, fmt.Errorf("%w: %s", ErrDagNotFound, t)
		}
	}
	var edges []struct {
		DagID    string                   `db:"dag_id"`
		Upstream string                   `db:"upstream_dag_id"`
		Mapping  domain.DependencyMapping `db:"mapping"`
		Lookback int                      `db:"lookback"`
	}
	err = sqlx.SelectContext(ctx, q, &edges, `
		SELECT dag_id, upstream_dag_id, mapping, lookback FROM dag_dependencies
		WHERE dag_id = ANY ($1) ORDER BY dag_id, position`, pq.StringArray(slices.Collect(maps.Keys(byID))))
	if err != nil {
		return groupGraph{}, fmt.Errorf("read the group's dependencies: %w", err)
	}
	g := groupGraph{nodes: make(map[string]domain.DagNode, len(dags)), schedules: make(map[string]*schedule.Schedule, len(dags))}
	for _, d := range dags {
		sched, err := schedule.Parse(d.Schedule, d.Timezone)
		if err != nil {
			return groupGraph{}, fmt.Errorf("%w: %s: %w", domain.ErrInvalidDag, d.DagID, err)
		}
		g.schedules[d.DagID] = sched
		g.nodes[d.DagID] = domain.DagNode{DagID: d.DagID, DependsOnPast: d.DependsOnPast}
	}
	for _, e := range edges {
		n := g.nodes[e.DagID]
		n.Upstreams = append(n.Upstreams, domain.Upstream{DagID: e.Upstream, Mapping: e.Mapping, Lookback: e.Lookback})
		g.nodes[e.DagID] = n
	}
	g.byID = byID
	if err := g.keep(memberIDs); err != nil {
		return groupGraph{}, err
	}
	return g, nil
}

// keep makes memberIDs (sorted) the members: their links, depths and order. A DAG that is
// no member is followed through, to the nearest members upstream of it.
func (g *groupGraph) keep(memberIDs []string) error {
	var err error
	if g.links, g.depth, err = domain.MemberLinks(memberIDs, g.nodes); err != nil {
		return err
	}
	g.members = g.members[:0]
	for _, id := range memberIDs {
		g.members = append(g.members, g.byID[id])
	}
	slices.SortStableFunc(g.members, func(a, b Dag) int { return g.depth[a.DagID] - g.depth[b.DagID] })
	return nil
}

// inFlightOutsideBackfills reads a DAG's runs queued or running outside any backfill: a
// group's runs wait for those that produce a slot they depend on. There are few (manual runs
// in flight), read through dag_runs_unfinished_outside_backfills.
func inFlightOutsideBackfills(ctx context.Context, q sqlx.QueryerContext, dagID string) ([]domain.Span, error) {
	var rows []struct {
		Start time.Time `db:"logical_date"`
		End   time.Time `db:"data_interval_end"`
	}
	err := sqlx.SelectContext(ctx, q, &rows, `
		SELECT logical_date, data_interval_end FROM dag_runs
		WHERE dag_id = $1 AND backfill_id IS NULL AND state IN ('queued', 'running')
		ORDER BY logical_date`, dagID)
	if err != nil {
		return nil, fmt.Errorf("read runs in flight of %q: %w", dagID, err)
	}
	spans := make([]domain.Span, len(rows))
	for i, r := range rows {
		spans[i] = domain.Span{Start: r.Start, End: r.End}
	}
	return spans, nil
}

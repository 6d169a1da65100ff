package repo

import (
	"context"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
)

// GroupDryRun is what a group's creation would do: per member its slots, and the
// dependencies among their runs.
type GroupDryRun struct {
	Members []GroupDryRunMember
	// Dependencies counts the run-to-run dependencies; Blocked the runs that would wait for
	// another at the start.
	Dependencies int
	Blocked      int
	PlanHash     string
}

// GroupDryRunMember is one member of a group's dry run.
type GroupDryRunMember struct {
	DagID string
	Depth int
	DryRun
	Blocked int
}

// BackfillGroupDryRun answers what a group's creation would do, writing nothing. An active
// backfill of a member's DAG does not stop the preview.
func (s *Store) BackfillGroupDryRun(ctx context.Context, p domain.GroupRequest) (GroupDryRun, error) {
	plan, err := s.planGroup(ctx, p)
	if err != nil {
		return GroupDryRun{}, err
	}
	var out GroupDryRun
	err = s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) error {
		out = GroupDryRun{Members: make([]GroupDryRunMember, len(plan.graph.members))}
		members, err := s.groupMemberPlans(ctx, q, plan)
		if err != nil {
			return err
		}
		hashes := make([]domain.GroupMemberPlanHash, len(plan.graph.members))
		for i, d := range plan.graph.members {
			req := p.Member(d.DagID, 0, 0)
			slots := members[i].Slots
			if err := decideSlots(ctx, q, d.DagID, p.ReprocessBehavior, slots); err != nil {
				return err
			}
			m := &out.Members[i]
			m.DagID, m.Depth, m.Slots = d.DagID, plan.graph.depth[d.DagID], slots
			m.PlanHash = domain.PlanHash(d.Schedule, d.Timezone, slots)
			if m.Estimate, m.EstimateBasis, err = backfillEstimate(ctx, q, req, slots); err != nil {
				return err
			}
			hashes[i] = domain.GroupMemberPlanHash{DagID: d.DagID, Depth: m.Depth, PlanHash: m.PlanHash}
		}
		deps, err := domain.PlanGroupEdges(members, plan.graph.links, plan.edgeGraph(), s.maxDependencies)
		if err != nil {
			return err
		}
		for i, n := range deps.Blocked {
			out.Members[i].Blocked = n
			out.Blocked += n
		}
		out.Dependencies = deps.Edges.Len()
		out.PlanHash = domain.GroupPlanHash(hashes, out.Dependencies)
		return nil
	})
	return out, err
}

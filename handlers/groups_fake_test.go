package handlers_test

import (
	"context"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// The fake store's groups: each checks what reaches it as its spec says the handler leaves it.

func fakeGroup(id int64) repo.BackfillGroup {
	return repo.BackfillGroup{ID: id, DagIDs: []string{"d"}, IncludeDownstream: domain.IncludeNone, FromDate: fakeTime,
		ToDate: fakeTime, ReprocessBehavior: "none", MaxActiveRuns: 1, State: "running", PlanHash: "h",
		CreatedAt: fakeTime, UpdatedAt: fakeTime,
		Members: []repo.GroupMember{{GroupID: id, DagID: "d", BackfillID: 1, State: "running", Progress: repo.Progress{Queued: 1}}}}
}

func (f *fakeStore) checkGroup(p domain.GroupRequest) []string {
	problems := []string{checkTime("from_date", p.FromDate), checkTime("to_date", p.ToDate),
		checkEnum("include_downstream", string(p.IncludeDownstream), "none", "direct", "all"),
		checkEnum("reprocess_behavior", string(p.ReprocessBehavior), "none", "failed", "completed"),
		checkRange("max_active_runs", p.MaxActiveRuns, 1, 1000), checkConf("dag_run_conf", p.DagRunConf),
		checkRange("dag_ids", len(p.DagIDs), 1, domain.MaxGroupTargets), checkRange("priority", p.Priority, -10, 10)}
	for _, id := range p.DagIDs {
		problems = append(problems, checkDagID(id))
	}
	if p.Description != nil {
		problems = append(problems, checkLen("description", *p.Description, 0, 10000))
	}
	return problems
}

func (f *fakeStore) BackfillGroupCreate(ctx context.Context, p domain.GroupRequest) (repo.BackfillGroup, bool, error) {
	return fakeGroup(1), false, f.call("BackfillGroupCreate", true, f.checkGroup(p)...)
}

func (f *fakeStore) BackfillGroupDryRun(ctx context.Context, p domain.GroupRequest) (repo.GroupDryRun, error) {
	err := f.call("BackfillGroupDryRun", false, f.checkGroup(p)...)
	slots := []domain.PlannedSlot{{SortOrdinal: 1, LogicalDate: fakeTime, IntervalEnd: fakeTime, Action: "create"}}
	return repo.GroupDryRun{PlanHash: "h", Members: []repo.GroupDryRunMember{{DagID: "d",
		DryRun: repo.DryRun{Slots: slots, PlanHash: "m", EstimateBasis: domain.EstimateNoSuccessfulRuns}}}}, err
}

func (f *fakeStore) BackfillGroupGet(ctx context.Context, id int64) (repo.BackfillGroup, error) {
	return fakeGroup(id), f.call("BackfillGroupGet", false, checkPos("group_id", id))
}

func (f *fakeStore) BackfillGroupList(ctx context.Context, p repo.BackfillGroupListParams) ([]repo.BackfillGroup, int, error) {
	err := f.call("BackfillGroupList", false, checkRange("limit", p.Limit, 1, 1001))
	return []repo.BackfillGroup{fakeGroup(1)}, 1, err
}

func (f *fakeStore) BackfillGroupPause(ctx context.Context, id int64) (repo.BackfillGroup, error) {
	return fakeGroup(id), f.call("BackfillGroupPause", true, checkPos("group_id", id))
}

func (f *fakeStore) BackfillGroupUnpause(ctx context.Context, id int64) (repo.BackfillGroup, error) {
	return fakeGroup(id), f.call("BackfillGroupUnpause", true, checkPos("group_id", id))
}

func (f *fakeStore) BackfillGroupCancel(ctx context.Context, id int64) (repo.BackfillGroup, error) {
	return fakeGroup(id), f.call("BackfillGroupCancel", true, checkPos("group_id", id))
}

func (f *fakeStore) BackfillGroupPatch(ctx context.Context, p repo.GroupPatchParams) (repo.BackfillGroup, error) {
	problems := []string{checkPos("group_id", p.ID)}
	if p.Priority != nil {
		problems = append(problems, checkRange("priority", *p.Priority, -10, 10))
	}
	if p.MaxActiveRuns != nil {
		problems = append(problems, checkRange("max_active_runs", *p.MaxActiveRuns, 1, 1000))
	}
	if p.MaxFailedRuns != nil {
		problems = append(problems, checkRange("max_failed_runs", *p.MaxFailedRuns, 1, 1<<31-1))
	}
	if p.Description != nil {
		problems = append(problems, checkLen("description", *p.Description, 0, 10000))
	}
	return fakeGroup(p.ID), f.call("BackfillGroupPatch", true, problems...)
}

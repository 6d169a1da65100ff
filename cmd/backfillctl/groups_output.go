package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/backfillsvc/backfill/client"
)

// printGroup shows one group: JSON, or a vertical table like a backfill's, then its members.
func (c *cli) printGroup(g client.BackfillGroup) error {
	if c.g.output == "json" {
		return c.printJSON(g)
	}
	p := g.Progress
	state := string(g.State)
	if g.PauseReason != nil {
		state += " (" + string(*g.PauseReason) + ")"
	}
	budget := "none"
	if g.MaxFailedRuns != nil {
		budget = fmt.Sprint(*g.MaxFailedRuns)
	}
	conf := "null"
	if g.DagRunConf != nil {
		raw, _ := json.Marshal(g.DagRunConf)
		conf = string(raw)
	}
	completed := "-"
	if g.CompletedAt != nil {
		completed = stamp(*g.CompletedAt)
	}
	err := c.table([][]string{
		{"ID:", fmt.Sprint(g.Id)},
		{"STATE:", state},
		{"TARGETS:", strings.Join(g.DagIds, ", ")},
		{"INCLUDE DOWNSTREAM:", string(g.IncludeDownstream)},
		{"FROM DATE:", instant(g.FromDate)},
		{"TO DATE:", instant(g.ToDate)},
		{"PROGRESS:", fmt.Sprintf("%d/%d done (%s)", p.Done(), p.Total, percent(p.Done(), p.Total))},
		{"RUNS:", groupCountsLine(p)},
		{"DEPENDENCIES:", fmt.Sprint(g.Dependencies)},
		{"PLAN HASH:", g.PlanHash},
		{"REPROCESS BEHAVIOR:", string(g.ReprocessBehavior)},
		{"MAX ACTIVE RUNS:", fmt.Sprintf("%d per member", g.MaxActiveRuns)},
		{"MAX FAILED RUNS:", budget},
		{"PRIORITY:", fmt.Sprint(g.Priority)},
		{"POOL:", deref(g.Pool)},
		{"RUN BACKWARDS:", fmt.Sprint(g.RunBackwards)},
		{"DAG RUN CONF:", conf},
		{"DESCRIPTION:", deref(g.Description)},
		{"CODE REF:", deref(g.CodeRef)},
		{"CREATED BY:", deref(g.CreatedBy)},
		{"REASON:", deref(g.Reason)},
		{"CREATED AT:", stamp(g.CreatedAt)},
		{"UPDATED AT:", stamp(g.UpdatedAt)},
		{"COMPLETED AT:", completed},
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	return showTable(c, memberColumns, g.Members)
}

// groupCountsLine is a group's (or member's) runs per state; the blocked ones are among the
// queued.
func groupCountsLine(p client.BackfillProgress) string {
	return fmt.Sprintf("%s (%d blocked)", countsLine(p), p.Blocked)
}

// memberColumns are a group's member backfills, in the service's order: by depth, then DAG.
var memberColumns = columns[client.BackfillGroupMember]{
	header: []string{"DAG_ID", "BACKFILL", "DEPTH", "STATE", "DONE", "SUCCESS", "FAILED", "CANCELED", "SKIPPED", "RUNNING", "QUEUED", "BLOCKED"},
	row: func(m client.BackfillGroupMember) []string {
		p := m.Progress
		return []string{m.DagId, fmt.Sprint(m.BackfillId), fmt.Sprint(m.Depth), string(m.State),
			fmt.Sprintf("%d/%d", p.Done(), p.Total), fmt.Sprint(p.Success), fmt.Sprint(p.Failed), fmt.Sprint(p.Canceled),
			fmt.Sprint(p.Skipped), fmt.Sprint(p.Running), fmt.Sprint(p.Queued), fmt.Sprint(p.Blocked)}
	},
}

var groupColumns = columns[client.BackfillGroup]{
	header: []string{"ID", "STATE", "TARGETS", "MEMBERS", "FROM_DATE", "TO_DATE", "DONE", "SUCCESS", "FAILED", "CANCELED", "SKIPPED", "BLOCKED", "CREATED_AT", "CREATED_BY", "REASON"},
	row: func(g client.BackfillGroup) []string {
		p := g.Progress
		return []string{fmt.Sprint(g.Id), string(g.State), strings.Join(g.DagIds, ","), fmt.Sprint(len(g.Members)),
			instant(g.FromDate), instant(g.ToDate), fmt.Sprintf("%d/%d", p.Done(), p.Total), fmt.Sprint(p.Success),
			fmt.Sprint(p.Failed), fmt.Sprint(p.Canceled), fmt.Sprint(p.Skipped), fmt.Sprint(p.Blocked),
			stamp(g.CreatedAt), deref(g.CreatedBy), deref(g.Reason)}
	},
}

// printGroupDryRun shows a group's plan: a row per member with its slots by action and the
// runs that would wait at the start, then the totals and the plan hash.
func (c *cli) printGroupDryRun(plan client.BackfillGroupDryRun) error {
	if c.g.output == "json" {
		return c.printJSON(plan)
	}
	rows := [][]string{{"DAG_ID", "DEPTH", "SLOTS", "CREATE", "REPROCESS", "SKIP", "BLOCKED"}}
	total := map[client.DryRunAction]int{}
	slots := 0
	for _, m := range plan.Members {
		actions := map[client.DryRunAction]int{}
		for _, e := range m.Runs {
			actions[e.Action]++
			total[e.Action]++
		}
		slots += len(m.Runs)
		rows = append(rows, []string{m.DagId, fmt.Sprint(m.Depth), fmt.Sprint(len(m.Runs)),
			fmt.Sprint(actions[client.DryRunActionCreate]), fmt.Sprint(actions[client.DryRunActionReprocess]),
			fmt.Sprint(actions[client.DryRunActionSkip]), fmt.Sprint(m.Blocked)})
	}
	if err := c.table(rows); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%d members, %d slots: %d create, %d reprocess, %d skip (nothing was written)\n", len(plan.Members), slots,
		total[client.DryRunActionCreate], total[client.DryRunActionReprocess], total[client.DryRunActionSkip])
	fmt.Fprintf(c.stdout, "%d dependencies between runs; %d runs blocked at the start\n", plan.Dependencies, plan.Blocked)
	_, err := fmt.Fprintf(c.stdout, "plan hash %s (create exactly this plan with --if-match %s)\n", plan.PlanHash, plan.PlanHash)
	return err
}

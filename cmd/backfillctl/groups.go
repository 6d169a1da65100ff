package main

import (
	"context"
	"flag"

	"github.com/backfillsvc/backfill/client"
)

// groupsUsage is the usage section of the `groups` commands.
const groupsUsage = `Backfill groups (one window over several DAGs; a run waits for the upstream runs it needs):
  groups create --dag-id ID [--dag-id ID]... --from-date DATE --to-date DATE
                [--include-downstream none|direct|all] [--reprocess-behavior none|failed|completed]
                [--max-active-runs N] [--max-failed-runs N] [--run-backwards] [--dag-run-conf JSON]
                [--description TEXT] [--pool NAME] [--priority -10..10] [--code-ref REF]
                [--reason TEXT] [--actor NAME] [--idempotency-key KEY] [--if-match PLAN_HASH] [--dry-run]
        A member backfill per DAG, all created at once or none: the --dag-id targets and, with
        --include-downstream, the DAGs that name one as an upstream (direct) or every DAG
        downstream of one (all). A run is not handed out until the runs it waits for (as the
        DAGs' --upstream and --depends-on-past say) succeeded; one that fails cancels what
        waits on it. --max-active-runs is per member; --max-failed-runs counts the failed
        runs of every member and pauses the whole group. --dry-run writes nothing and prints
        each member's depth, slots by action and runs blocked at the start, then the
        dependencies, the blocked runs and the plan hash (for --if-match).
  groups get ID
        The group, then its members by depth with their progress; BLOCKED counts the queued
        runs that still wait for another run.
  groups list [--state STATE] [--dag-id ID] [--limit N] [--offset N | --cursor C]
        Oldest first; --dag-id: the groups with a member of that DAG.
  groups watch ID [--interval D] [--timeout 0] [--wait-through-pause]
        Polls the group until it is succeeded, failed or canceled, redrawing its members by
        depth with their bars, counts and blocked runs (a line per --interval without a
        terminal); exit codes as watch's, for the group's state.
  groups pause ID
  groups unpause ID
  groups cancel ID
        Act on the group and every member; on a member backfill they are refused
        (managed_by_group).
  groups patch ID [--max-active-runs N] [--max-failed-runs N|none] [--description TEXT] [--priority N]
        Changes a running or paused group's settings and its members'; the next claim obeys them.
`

var groupID = number("group ID")

// groupFlags are the flags of a group's creation request: backfills create's, but several
// --dag-id and no chosen dates.
type groupFlags struct {
	dagIDs                         repeated
	include, reprocess             string
	from, to                       dateValue
	maxActiveRuns, priority        int
	runBackwards                   bool
	conf                           confValue
	budget                         budgetValue
	description, pool              string
	codeRef, reason                string
	idempotencyKey, ifMatch, actor string
	dryRun                         bool
}

func (g *groupFlags) register(fs *flag.FlagSet) {
	fs.Var(&g.dagIDs, "dag-id", "a `DAG_ID` to backfill (required; repeat for more targets)")
	fs.StringVar(&g.include, "include-downstream", "none", "also backfill the DAGs downstream of the targets: none, direct (those naming a target as an upstream) or all")
	fs.Var(&g.from, "from-date", "the window's start, inclusive, for every member; `DATE` is 2024-03-01 (midnight UTC) or RFC 3339 (required)")
	fs.Var(&g.to, "to-date", "the window's end, inclusive, for every member (required)")
	fs.StringVar(&g.reprocess, "reprocess-behavior", "none", "existing runs: none (skip), failed (rerun failed/canceled) or completed (rerun all)")
	fs.IntVar(&g.maxActiveRuns, "max-active-runs", 0, "most runs of each member at once, 1..1000 (server default 10)")
	fs.Var(&g.budget, "max-failed-runs", "pause the group when a run fails while `N` runs of its members have failed (none: no limit)")
	fs.BoolVar(&g.runBackwards, "run-backwards", false, "run the newest dates first")
	fs.Var(&g.conf, "dag-run-conf", "a `JSON` object given to every run of every member as its conf")
	fs.StringVar(&g.description, "description", "", "free text")
	fs.StringVar(&g.pool, "pool", "", "claim every member's runs in this `POOL` (see pools put)")
	fs.IntVar(&g.priority, "priority", 0, "every member's `PRIORITY`, -10..10 (server default 0)")
	fs.StringVar(&g.codeRef, "code-ref", "", "the code every member's runs are to run (fixed once created; BACKFILL_CODE_REF)")
	fs.StringVar(&g.reason, "reason", "", "why the group is made, e.g. a ticket (at most 500 characters)")
	fs.StringVar(&g.actor, "actor", "", "who asks (sent as X-Actor): recorded as created_by where the service has no per-user identity")
	fs.StringVar(&g.idempotencyKey, "idempotency-key", "", "the request's key (default: a random one); the request is retried with it after a 503 or a network error, and the same key and request answer the same group")
	fs.StringVar(&g.ifMatch, "if-match", "", "create only if the plan still has this `PLAN_HASH` (from --dry-run)")
	fs.BoolVar(&g.dryRun, "dry-run", false, "only show what would be created, writing nothing")
}

func (g *groupFlags) request(fs *flag.FlagSet) (client.BackfillGroupCreate, error) {
	switch {
	case len(g.dagIDs) == 0:
		return client.BackfillGroupCreate{}, usageErrorf("--dag-id is required (once per target)")
	case !g.from.set || !g.to.set:
		return client.BackfillGroupCreate{}, usageErrorf("--from-date and --to-date are required")
	}
	include, err := enum("include-downstream", g.include, []client.BackfillGroupCreateIncludeDownstream{
		client.BackfillGroupCreateIncludeDownstreamIncludeNone, client.BackfillGroupCreateIncludeDownstreamIncludeDirect,
		client.BackfillGroupCreateIncludeDownstreamIncludeAll})
	if err != nil {
		return client.BackfillGroupCreate{}, err
	}
	rb, err := enum("reprocess-behavior", g.reprocess, []client.ReprocessBehavior{
		client.ReprocessBehaviorNone, client.ReprocessBehaviorFailed, client.ReprocessBehaviorCompleted})
	if err != nil {
		return client.BackfillGroupCreate{}, err
	}
	req := client.BackfillGroupCreate{
		DagIds: g.dagIDs, FromDate: g.from.t, ToDate: g.to.t, IncludeDownstream: &include,
		ReprocessBehavior: &rb, RunBackwards: &g.runBackwards, DagRunConf: g.conf.conf,
	}
	setIf(fs, "max-active-runs", &req.MaxActiveRuns, int32(g.maxActiveRuns))
	if isSet(fs, "max-failed-runs") {
		req.MaxFailedRuns = g.budget.n
	}
	setIf(fs, "description", &req.Description, g.description)
	setIf(fs, "pool", &req.Pool, g.pool)
	setIf(fs, "priority", &req.Priority, int32(g.priority))
	setIf(fs, "code-ref", &req.CodeRef, g.codeRef)
	setIf(fs, "reason", &req.Reason, g.reason)
	return req, nil
}

var groupsCreate = do(none, func(fs *flag.FlagSet) action[struct{}] {
	var gf groupFlags
	gf.register(fs)
	return func(ctx context.Context, c *cli, api *client.Client, _ struct{}) error {
		req, err := gf.request(fs)
		if err != nil {
			return err
		}
		if gf.dryRun {
			plan, err := dryRunGroup(ctx, api, req)
			if err != nil {
				return err
			}
			return c.printGroupDryRun(plan)
		}
		g, err := createGroup(ctx, api, req, client.CreateOptions{IdempotencyKey: gf.idempotencyKey, IfPlan: gf.ifMatch, Actor: gf.actor})
		if err != nil {
			return err
		}
		return c.printGroup(g)
	}
})

// groupByID is the shape of get, pause, unpause and cancel: one group id, one call.
func groupByID(f call[int64, client.BackfillGroup]) runFunc {
	return get(groupID, f, (*cli).printGroup)
}

var (
	groupsGet     = groupByID(getGroup)
	groupsPause   = groupByID(pauseGroup)
	groupsUnpause = groupByID(unpauseGroup)
	groupsCancel  = groupByID(cancelGroup)
)

var groupsList = list(listing[struct{}, client.BackfillGroupCollection, client.BackfillGroup]{
	arg: none, cursors: true, cols: groupColumns,
	flags: func(fs *flag.FlagSet, pg *pageFlags) func(context.Context, *client.Client, struct{}) (client.BackfillGroupCollection, error) {
		state := fs.String("state", "", "only groups in this state: "+joinEnum(client.BackfillStates()))
		dag := fs.String("dag-id", "", "only groups with a member backfill of this DAG")
		return func(ctx context.Context, api *client.Client, _ struct{}) (client.BackfillGroupCollection, error) {
			params := &client.ListBackfillGroupsParams{Limit: pg.limitP, Offset: pg.offsetP, Cursor: pg.cursorP}
			if *dag != "" {
				params.DagId = dag
			}
			if *state != "" {
				s, err := enum("state", *state, client.BackfillStates())
				if err != nil {
					return client.BackfillGroupCollection{}, err
				}
				params.State = &s
			}
			return listGroups(ctx, api, params)
		}
	},
	page: func(l client.BackfillGroupCollection) page[client.BackfillGroup] {
		return page[client.BackfillGroup]{items: l.BackfillGroups, total: l.TotalEntries, next: l.NextCursor}
	},
})

var groupsPatch = do(groupID, func(fs *flag.FlagSet) action[int64] {
	maxActive := fs.Int("max-active-runs", 0, "most runs of each member at once, 1..1000; the next claim obeys it")
	var budget budgetValue
	fs.Var(&budget, "max-failed-runs", "pause the group when a run fails while `N` runs of its members have failed (none: no limit)")
	description := fs.String("description", "", "free text (an empty one clears it)")
	priority := fs.Int("priority", 0, priorityUsage+"; the next claim ranks every member by it")
	return func(ctx context.Context, c *cli, api *client.Client, id int64) error {
		changes := client.GroupChanges{
			MaxActiveRuns: given(fs, "max-active-runs", int32(*maxActive)),
			MaxFailedRuns: budget.field(fs, "max-failed-runs"),
			Description:   given(fs, "description", *description),
			Priority:      given(fs, "priority", int32(*priority)),
		}
		if *description == "" && changes.Description.IsSet() {
			changes.Description = client.Null[string]()
		}
		if !changes.MaxActiveRuns.IsSet() && !changes.MaxFailedRuns.IsSet() && !changes.Description.IsSet() && !changes.Priority.IsSet() {
			return usageErrorf("nothing to change: give --max-active-runs, --max-failed-runs, --description or --priority")
		}
		g, err := api.PatchBackfillGroup(ctx, id, changes)
		if err != nil {
			return err
		}
		return c.printGroup(g)
	}
})

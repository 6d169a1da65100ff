package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// backfillFlags are the flags of a creation request, named as in Airflow's
// `airflow backfill create`.
type backfillFlags struct {
	dagID, reprocess, description string
	from, to                      dateValue
	maxActiveRuns, priority       int
	runBackwards                  bool
	conf                          confValue
	pool, codeRef, reason         string
	logicalDates                  logicalDates
}

func (b *backfillFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.dagID, "dag-id", "", "the `DAG_ID` to backfill (required)")
	fs.Var(&b.from, "from-date", "the window's start, inclusive: every schedule tick (slot) whose logical date is at or after this instant; `DATE` is 2024-03-01 (midnight UTC) or RFC 3339 (required)")
	fs.Var(&b.to, "to-date", "the window's end, inclusive: a tick exactly at this instant is included, later ones are not; 2024-03-31 is midnight UTC at the start of March 31, so @daily's March 31 slot is in and an hourly DAG's 01:00..23:00 slots of that day are out (required)")
	fs.StringVar(&b.reprocess, "reprocess-behavior", "none", "existing runs: none (skip), failed (rerun failed/canceled) or completed (rerun all)")
	fs.IntVar(&b.maxActiveRuns, "max-active-runs", 0, "most runs of the backfill at once, 1..1000 (server default 10)")
	fs.BoolVar(&b.runBackwards, "run-backwards", false, "run the newest dates first")
	fs.Var(&b.conf, "dag-run-conf", "a `JSON` object given to every run as its conf, e.g. '{\"full_refresh\": true}'")
	fs.StringVar(&b.description, "description", "", "free text")
	fs.StringVar(&b.pool, "pool", "", "claim the backfill's runs in this `POOL` (see pools put)")
	fs.StringVar(&b.codeRef, "code-ref", "", "the code the runs are to run (an image digest, a git SHA; at most 200 characters), fixed once created and given to programs as BACKFILL_CODE_REF")
	fs.StringVar(&b.reason, "reason", "", "why the backfill is made, e.g. a ticket (at most 500 characters)")
	fs.IntVar(&b.priority, "priority", 0, priorityUsage)
	b.logicalDates.register(fs)
}

func (b *backfillFlags) request(fs *flag.FlagSet) (client.BackfillCreate, error) {
	switch {
	case b.dagID == "":
		return client.BackfillCreate{}, usageErrorf("--dag-id is required")
	case !b.from.set || !b.to.set:
		return client.BackfillCreate{}, usageErrorf("--from-date and --to-date are required")
	}
	rb, err := enum("reprocess-behavior", b.reprocess, []client.ReprocessBehavior{
		client.ReprocessBehaviorNone, client.ReprocessBehaviorFailed, client.ReprocessBehaviorCompleted})
	if err != nil {
		return client.BackfillCreate{}, err
	}
	req := client.BackfillCreate{
		DagId: b.dagID, FromDate: b.from.t, ToDate: b.to.t,
		ReprocessBehavior: &rb, RunBackwards: &b.runBackwards, DagRunConf: b.conf.conf,
	}
	setIf(fs, "max-active-runs", &req.MaxActiveRuns, int32(b.maxActiveRuns))
	setIf(fs, "description", &req.Description, b.description)
	setIf(fs, "pool", &req.Pool, b.pool)
	setIf(fs, "code-ref", &req.CodeRef, b.codeRef)
	setIf(fs, "reason", &req.Reason, b.reason)
	setIf(fs, "priority", &req.Priority, int32(b.priority))
	dates, err := b.logicalDates.list()
	if err != nil {
		return client.BackfillCreate{}, err
	}
	if dates != nil {
		req.LogicalDates = &dates
	}
	return req, nil
}

var backfillsCreate = do(none, func(fs *flag.FlagSet) action[struct{}] {
	var bf backfillFlags
	bf.register(fs)
	key := fs.String("idempotency-key", "", "the request's key (default: a random one); the request is retried with it after a 503 or a network error, and the same key and request answer the same backfill")
	dryRun := fs.Bool("dry-run", false, "only show what would be created (as backfills dry-run)")
	var budget budgetValue
	fs.Var(&budget, "max-failed-runs", budgetUsage)
	ifMatch := fs.String("if-match", "", "create only if the plan still has this `PLAN_HASH` (from dry-run)")
	actor := fs.String("actor", "", "who asks (sent as X-Actor): recorded as created_by where the service has no per-user identity")
	wf := registerWait(fs, "watch the backfill's progress until it is terminal; the exit code tells how it ended")
	return func(ctx context.Context, c *cli, api *client.Client, _ struct{}) error {
		req, err := bf.request(fs)
		if err != nil {
			return err
		}
		if isSet(fs, "max-failed-runs") {
			req.MaxFailedRuns = budget.n
		}
		if *dryRun {
			return c.dryRun(ctx, api, req, dryRunView{})
		}
		b, err := api.CreateBackfill(ctx, req, client.CreateOptions{IdempotencyKey: *key, IfPlan: *ifMatch, Actor: *actor})
		if err != nil {
			return err
		}
		return c.showOrWatch(ctx, api, b, wf, fmt.Sprintf("backfill %d created: %d runs of %s from %s to %s",
			b.Id, b.Progress.Total, b.DagId, b.FromDate.Format(time.RFC3339), b.ToDate.Format(time.RFC3339)))
	}
})

var backfillsDryRun = do(none, func(fs *flag.FlagSet) action[struct{}] {
	var bf backfillFlags
	bf.register(fs)
	var view dryRunView
	fs.BoolVar(&view.summary, "summary", false, "print only the counts by action and the first and last slot, not a row per slot")
	fs.IntVar(&view.limit, "limit", 0, "print at most `N` slots (0: all); the counts are always of the whole plan")
	return func(ctx context.Context, c *cli, api *client.Client, _ struct{}) error {
		if view.limit < 0 {
			return usageErrorf("--limit must be 0 (all) or more")
		}
		req, err := bf.request(fs)
		if err != nil {
			return err
		}
		return c.dryRun(ctx, api, req, view)
	}
})

func (c *cli) dryRun(ctx context.Context, api *client.Client, req client.BackfillCreate, view dryRunView) error {
	l, err := api.DryRunBackfill(ctx, req)
	if err != nil {
		return err
	}
	return c.printDryRun(l, view)
}

// showOrWatch ends a command that created a backfill: it shows it, or with --wait says
// created (in a table) and watches it to its end.
func (c *cli) showOrWatch(ctx context.Context, api *client.Client, b client.Backfill, wf *waitFlags, created string) error {
	if !wf.wait {
		return c.printBackfill(b)
	}
	if c.g.output == "table" {
		fmt.Fprintln(c.stdout, created)
	}
	return c.watchBackfill(ctx, api, b.Id, *wf)
}

// byID is the shape of get, pause, unpause and cancel: one backfill id, one call.
func byID(f call[int64, client.Backfill]) runFunc {
	return get(backfillID, f, (*cli).printBackfill)
}

var (
	backfillsGet     = byID((*client.Client).GetBackfill)
	backfillsPause   = byID((*client.Client).PauseBackfill)
	backfillsUnpause = byID((*client.Client).UnpauseBackfill)
	backfillsCancel  = byID((*client.Client).CancelBackfill)
)

var backfillColumns = columns[client.Backfill]{
	header: []string{"ID", "DAG_ID", "STATE", "PRIORITY", "FROM_DATE", "TO_DATE", "DONE", "SUCCESS", "FAILED", "CANCELED", "SKIPPED", "CREATED_AT", "CREATED_BY", "REASON"},
	row: func(b client.Backfill) []string {
		p := b.Progress
		return []string{fmt.Sprint(b.Id), b.DagId, string(b.State), fmt.Sprint(b.Priority), instant(b.FromDate), instant(b.ToDate),
			fmt.Sprintf("%d/%d", p.Done(), p.Total), fmt.Sprint(p.Success), fmt.Sprint(p.Failed), fmt.Sprint(p.Canceled),
			fmt.Sprint(p.Skipped), stamp(b.CreatedAt), deref(b.CreatedBy), deref(b.Reason)}
	},
}

var backfillsList = list(listing[struct{}, client.BackfillCollection, client.Backfill]{
	arg: none, cols: backfillColumns,
	flags: func(fs *flag.FlagSet, pg *pageFlags) func(context.Context, *client.Client, struct{}) (client.BackfillCollection, error) {
		dag := fs.String("dag-id", "", "only backfills of this DAG")
		state := fs.String("state", "", "only backfills in this state: "+joinEnum(client.BackfillStates()))
		var active optBool
		fs.Var(&active, "active", "only active backfills (--active=false: only terminal ones)")
		orderBy := fs.String("order-by", "-id", "-id (newest first) or id (oldest first)")
		return func(ctx context.Context, api *client.Client, _ struct{}) (client.BackfillCollection, error) {
			ob, err := enum("order-by", *orderBy, []client.ListBackfillsParamsOrderBy{
				client.ListBackfillsParamsOrderByIdAsc, client.ListBackfillsParamsOrderByIdDesc})
			if err != nil {
				return client.BackfillCollection{}, err
			}
			params := &client.ListBackfillsParams{Active: active.v, OrderBy: &ob, Limit: pg.limitP, Offset: pg.offsetP}
			if *dag != "" {
				params.DagId = dag
			}
			if *state != "" {
				s, err := enum("state", *state, client.BackfillStates())
				if err != nil {
					return client.BackfillCollection{}, err
				}
				params.State = &s
			}
			return api.ListBackfills(ctx, params)
		}
	},
	page: func(l client.BackfillCollection) page[client.Backfill] {
		return page[client.Backfill]{items: l.Backfills, total: l.TotalEntries}
	},
})

var backfillsRuns = list(listing[int64, client.BackfillDagRunCollection, client.BackfillDagRun]{
	arg: backfillID, cursors: true, cols: slotColumns,
	flags: func(fs *flag.FlagSet, pg *pageFlags) func(context.Context, *client.Client, int64) (client.BackfillDagRunCollection, error) {
		orderBy := fs.String("order-by", "sort_ordinal", "sort_ordinal or -sort_ordinal")
		state := runStateFlag(fs, "only slots whose run is in this state")
		return func(ctx context.Context, api *client.Client, id int64) (client.BackfillDagRunCollection, error) {
			ob, err := enum("order-by", *orderBy, []client.ListBackfillDagRunsParamsOrderBy{
				client.ListBackfillDagRunsParamsOrderBySortOrdinalAsc, client.ListBackfillDagRunsParamsOrderBySortOrdinalDesc})
			if err != nil {
				return client.BackfillDagRunCollection{}, err
			}
			params := client.ListBackfillDagRunsParams{OrderBy: &ob, Limit: pg.limitP, Offset: pg.offsetP, Cursor: pg.cursorP}
			if params.State, err = state(); err != nil {
				return client.BackfillDagRunCollection{}, err
			}
			return api.ListBackfillDagRuns(ctx, id, &params)
		}
	},
	page: func(l client.BackfillDagRunCollection) page[client.BackfillDagRun] {
		return page[client.BackfillDagRun]{items: l.BackfillDagRuns, total: l.TotalEntries, next: l.NextCursor}
	},
})

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
	maxActiveRuns                 int
	runBackwards                  bool
	conf                          confValue
	pool                          string
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
}

func (b *backfillFlags) request(fs *flag.FlagSet) (client.BackfillCreate, error) {
	switch {
	case b.dagID == "":
		return client.BackfillCreate{}, usageErrorf("--dag-id is required")
	case !b.from.set || !b.to.set:
		return client.BackfillCreate{}, usageErrorf("--from-date and --to-date are required")
	}
	if err := oneOf("reprocess-behavior", b.reprocess, "none", "failed", "completed"); err != nil {
		return client.BackfillCreate{}, err
	}
	rb := client.ReprocessBehavior(b.reprocess)
	req := client.BackfillCreate{
		DagId: b.dagID, FromDate: b.from.t, ToDate: b.to.t,
		ReprocessBehavior: &rb, RunBackwards: &b.runBackwards, DagRunConf: b.conf.conf,
	}
	if isSet(fs, "max-active-runs") {
		n := int32(b.maxActiveRuns)
		req.MaxActiveRuns = &n
	}
	setIf(fs, "description", &req.Description, b.description)
	setIf(fs, "pool", &req.Pool, b.pool)
	return req, nil
}

func backfillsCreate(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("backfills create", "backfills create --dag-id ID --from-date DATE --to-date DATE [flags]", &c.g, c.stderr)
	var bf backfillFlags
	bf.register(fs)
	key := fs.String("idempotency-key", "", "the request's key (default: a random one); the request is retried with it after a 503 or a network error, and the same key and request answer the same backfill")
	dryRun := fs.Bool("dry-run", false, "only show what would be created (as backfills dry-run)")
	var wf waitFlags
	fs.BoolVar(&wf.wait, "wait", false, "watch the backfill's progress until it is terminal; the exit code tells how it ended")
	wf.register(fs)
	var pf planFlags
	pf.register(fs)
	req, api, err := c.backfillRequest(fs, &bf, args)
	if err != nil {
		return err
	}
	pf.apply(fs, &req)
	if *dryRun {
		return c.dryRun(ctx, api, req)
	}
	var b client.Backfill
	if pf.ifMatch != "" {
		b, err = api.CreateBackfillIfPlan(ctx, req, *key, pf.ifMatch)
	} else {
		b, err = api.CreateBackfill(ctx, req, *key)
	}
	if err != nil {
		return err
	}
	if !wf.wait {
		return c.printBackfill(b)
	}
	if c.g.output == "table" {
		fmt.Fprintf(c.stdout, "backfill %d created: %d runs of %s from %s to %s\n",
			b.Id, b.Progress.Total, b.DagId, b.FromDate.Format(time.RFC3339), b.ToDate.Format(time.RFC3339))
	}
	return c.watchBackfill(ctx, api, b.Id, wf)
}

func backfillsDryRun(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("backfills dry-run", "backfills dry-run --dag-id ID --from-date DATE --to-date DATE [flags]", &c.g, c.stderr)
	var bf backfillFlags
	bf.register(fs)
	req, api, err := c.backfillRequest(fs, &bf, args)
	if err != nil {
		return err
	}
	return c.dryRun(ctx, api, req)
}

// backfillRequest parses the flags of create and dry-run (no positional arguments) into a
// request, and opens the client.
func (c *cli) backfillRequest(fs *flag.FlagSet, bf *backfillFlags, args []string) (client.BackfillCreate, *client.Client, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return client.BackfillCreate{}, nil, err
	}
	if len(pos) != 0 {
		return client.BackfillCreate{}, nil, usageErrorf("unexpected arguments %q", pos)
	}
	req, err := bf.request(fs)
	if err != nil {
		return client.BackfillCreate{}, nil, err
	}
	api, err := c.client()
	if err != nil {
		return client.BackfillCreate{}, nil, err
	}
	return req, api, nil
}

func (c *cli) dryRun(ctx context.Context, api *client.Client, req client.BackfillCreate) error {
	l, err := api.DryRunBackfill(ctx, req)
	if err != nil {
		return err
	}
	return c.printDryRun(l)
}

// byID is the shape of get, pause, unpause and cancel: one backfill id, one call.
func byID(name string, call func(*client.Client, context.Context, int64) (client.Backfill, error)) func(context.Context, *cli, []string) error {
	return func(ctx context.Context, c *cli, args []string) error {
		fs := newFlagSet(name, name+" ID", &c.g, c.stderr)
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		id, err := oneID(pos, "backfill ID")
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		b, err := call(api, ctx, id)
		if err != nil {
			return err
		}
		return c.printBackfill(b)
	}
}

var (
	backfillsGet     = byID("backfills get", (*client.Client).GetBackfill)
	backfillsPause   = byID("backfills pause", (*client.Client).PauseBackfill)
	backfillsUnpause = byID("backfills unpause", (*client.Client).UnpauseBackfill)
	backfillsCancel  = byID("backfills cancel", (*client.Client).CancelBackfill)
	dagsDelete       = func(ctx context.Context, c *cli, args []string) error {
		fs := newFlagSet("dags delete", "dags delete DAG_ID", &c.g, c.stderr)
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageErrorf("expected one DAG_ID, got %d arguments", len(pos))
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		if err := api.DeleteDag(ctx, pos[0]); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.stdout, "DAG %s deleted with its runs and backfill history\n", pos[0])
		return err
	}
)

func backfillsList(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("backfills list", "backfills list [flags]", &c.g, c.stderr)
	dagID := fs.String("dag-id", "", "only backfills of this DAG")
	state := fs.String("state", "", "only backfills in this state: running, paused, canceling, succeeded, failed, canceled")
	var active optBool
	fs.Var(&active, "active", "only active backfills (--active=false: only terminal ones)")
	orderBy := fs.String("order-by", "-id", "-id (newest first) or id (oldest first)")
	limit := fs.Int("limit", 50, "page size, 1..1000")
	offset := fs.Int("offset", 0, "entries to skip")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	if err := oneOf("order-by", *orderBy, "id", "-id"); err != nil {
		return err
	}
	ob := client.ListBackfillsParamsOrderBy(*orderBy)
	params := &client.ListBackfillsParams{Active: active.v, OrderBy: &ob, Limit: limit, Offset: offset}
	if *dagID != "" {
		params.DagId = dagID
	}
	if *state != "" {
		if err := oneOf("state", *state, "running", "paused", "canceling", "succeeded", "failed", "canceled"); err != nil {
			return err
		}
		s := client.BackfillState(*state)
		params.State = &s
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	l, err := api.ListBackfills(ctx, params)
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	if err := c.printBackfillTable(l.Backfills); err != nil {
		return err
	}
	c.printPage(len(l.Backfills), *offset, l.TotalEntries)
	return nil
}

func backfillsRuns(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("backfills runs", "backfills runs ID [--state STATE] [--order-by sort_ordinal|-sort_ordinal] [--limit N] [--offset N | --cursor C]", &c.g, c.stderr)
	orderBy := fs.String("order-by", "sort_ordinal", "sort_ordinal or -sort_ordinal")
	state := fs.String("state", "", "only slots whose run is in this state: queued, running, success, failed or canceled")
	var pf pageFlags
	pf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "backfill ID")
	if err != nil {
		return err
	}
	if err := oneOf("order-by", *orderBy, "sort_ordinal", "-sort_ordinal"); err != nil {
		return err
	}
	ob := client.ListBackfillDagRunsParamsOrderBy(*orderBy)
	params := client.ListBackfillDagRunsParams{OrderBy: &ob}
	st, err := stateFlag(fs, *state)
	if err != nil {
		return err
	}
	if st != "" {
		params.State = &st
	}
	if params.Limit, params.Offset, params.Cursor, err = pf.params(fs); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	l, err := api.ListBackfillDagRuns(ctx, id, &params)
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	if err := c.printSlots(l.BackfillDagRuns); err != nil {
		return err
	}
	if params.Cursor == nil {
		c.printPage(len(l.BackfillDagRuns), pf.offset, l.TotalEntries)
	}
	c.printNext(l.NextCursor)
	return nil
}

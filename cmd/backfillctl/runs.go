package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/backfillsvc/backfill/client"
)

// runStates are the values of --state on the run listings.
var runStates = []string{"queued", "running", "success", "failed", "canceled"}

// stateFlag reads --state into a run state, empty when not given.
func stateFlag(fs *flag.FlagSet, state string) (client.DagRunState, error) {
	if !isSet(fs, "state") {
		return "", nil
	}
	if err := oneOf("state", state, runStates...); err != nil {
		return "", err
	}
	return client.DagRunState(state), nil
}

// pageFlags are --limit, --offset and --cursor of a listing.
type pageFlags struct {
	limit, offset int
	cursor        string
}

func (p *pageFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.limit, "limit", 50, "page size, 1..1000")
	fs.IntVar(&p.offset, "offset", 0, "entries to skip (not with --cursor)")
	fs.StringVar(&p.cursor, "cursor", "", "start after the page that printed this next cursor (not with --offset)")
}

// params answers the page's query parameters: the offset only when given, so that a cursor
// alone is a valid request.
func (p *pageFlags) params(fs *flag.FlagSet) (limit, offset *int, cursor *string, err error) {
	if isSet(fs, "offset") && p.cursor != "" {
		return nil, nil, nil, usageErrorf("--cursor and --offset are two ways to start a page: give one")
	}
	limit = &p.limit
	if isSet(fs, "offset") {
		offset = &p.offset
	}
	if p.cursor != "" {
		cursor = &p.cursor
	}
	return limit, offset, cursor, nil
}

// printNext tells how to read the next page, under a table.
func (c *cli) printNext(next *string) {
	if next != nil {
		fmt.Fprintf(c.stdout, "(more: add --cursor %s)\n", *next)
	}
}

func runsList(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("runs list", "runs list DAG_ID [--state STATE] [--backfill-id ID] [--limit N] [--offset N | --cursor C]", &c.g, c.stderr)
	state := fs.String("state", "", "only runs in this state: queued, running, success, failed or canceled")
	backfillID := fs.Int64("backfill-id", 0, "only runs this backfill owns")
	var pf pageFlags
	pf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("expected one DAG_ID, got %d arguments", len(pos))
	}
	st, err := stateFlag(fs, *state)
	if err != nil {
		return err
	}
	params := client.ListDagRunsParams{}
	if st != "" {
		params.State = &st
	}
	if isSet(fs, "backfill-id") {
		params.BackfillId = backfillID
	}
	if params.Limit, params.Offset, params.Cursor, err = pf.params(fs); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	l, err := api.ListDagRuns(ctx, pos[0], &params)
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	if err := c.printRuns(l.DagRuns...); err != nil {
		return err
	}
	if params.Cursor == nil {
		c.printPage(len(l.DagRuns), pf.offset, l.TotalEntries)
	}
	c.printNext(l.NextCursor)
	return nil
}

func runsGet(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("runs get", "runs get DAG_ID RUN_ID", &c.g, c.stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErrorf("expected DAG_ID and RUN_ID, got %d arguments", len(pos))
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	r, err := api.GetDagRun(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	return c.printRunsOrJSON(r)
}

func runsClaim(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("runs claim", "runs claim --worker-id ID [--dag-id ID] [--limit N] [--lease-seconds N]", &c.g, c.stderr)
	worker := fs.String("worker-id", "", "the worker that takes the runs (required)")
	dagID := fs.String("dag-id", "", "only runs of this DAG")
	limit := fs.Int("limit", 1, "most runs to take")
	lease := fs.Int("lease-seconds", 0, "lease length; heartbeat before it ends (server default if not given)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	if *worker == "" {
		return usageErrorf("--worker-id is required")
	}
	req := client.ClaimRequest{WorkerId: *worker, Limit: limit}
	setIf(fs, "dag-id", &req.DagId, *dagID)
	if isSet(fs, "lease-seconds") {
		req.LeaseSeconds = lease
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	runs, err := api.ClaimRuns(ctx, req)
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(runs)
	}
	if len(runs) == 0 {
		fmt.Fprintln(c.stdout, "no runs to claim")
		return nil
	}
	return c.printRuns(runs...)
}

func runsHeartbeat(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("runs heartbeat", "runs heartbeat ID --worker-id ID", &c.g, c.stderr)
	worker := fs.String("worker-id", "", "the worker that holds the lease (required)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "run ID (the numeric id, not the run_id)")
	if err != nil {
		return err
	}
	if *worker == "" {
		return usageErrorf("--worker-id is required")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	h, err := api.HeartbeatRun(ctx, id, *worker)
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(h)
	}
	fmt.Fprintf(c.stdout, "run %d: lease extended\n", id)
	return nil
}

func runsReport(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("runs report", "runs report DAG_ID RUN_ID --state success|failed|canceled [--worker-id ID] [--note TEXT]", &c.g, c.stderr)
	state := fs.String("state", "", "the outcome: success, failed or canceled (required)")
	worker := fs.String("worker-id", "", "the worker that holds the lease; without it, the run is marked as an operator would")
	note := fs.String("note", "", "why (kept on the run; shown by 'backfills runs')")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErrorf("expected DAG_ID and RUN_ID, got %d arguments", len(pos))
	}
	if err := oneOf("state", *state, "success", "failed", "canceled"); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	var r client.DagRun
	if isSet(fs, "note") {
		r, err = api.ReportRunWithNote(ctx, pos[0], pos[1], client.DagRunState(*state), *worker, *note)
	} else {
		r, err = api.ReportRun(ctx, pos[0], pos[1], client.DagRunState(*state), *worker)
	}
	if err != nil {
		return err
	}
	return c.printRunsOrJSON(r)
}

func runsRelease(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("runs release", "runs release ID --worker-id ID", &c.g, c.stderr)
	worker := fs.String("worker-id", "", "the worker that holds the lease (required)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "run ID (the numeric id, not the run_id)")
	if err != nil {
		return err
	}
	if *worker == "" {
		return usageErrorf("--worker-id is required")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	r, err := api.ReleaseRun(ctx, id, *worker)
	if err != nil {
		return err
	}
	return c.printRunsOrJSON(r)
}

func (c *cli) printRunsOrJSON(r client.DagRun) error {
	if c.g.output == "json" {
		return c.printJSON(r)
	}
	return c.printRuns(r)
}

func (c *cli) printRuns(runs ...client.DagRun) error {
	rows := [][]string{{"ID", "RUN_ID", "LOGICAL_DATE", "STATE", "ATTEMPT", "WORKER", "BACKFILL", "NOTE"}}
	for _, r := range runs {
		backfill := "-"
		if r.BackfillId != nil {
			backfill = strconv.FormatInt(*r.BackfillId, 10)
		}
		rows = append(rows, []string{fmt.Sprint(r.Id), r.RunId, stamp(r.LogicalDate), string(r.State), fmt.Sprint(r.Attempt),
			deref(r.WorkerId), backfill, oneLine(deref(r.Note))})
	}
	return c.table(rows)
}

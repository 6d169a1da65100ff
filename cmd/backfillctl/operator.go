package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/backfillsvc/backfill/client"
)

// budgetValue is --max-failed-runs: a count of at least 1, or "none" for no limit.
type budgetValue struct {
	n    *int32
	none bool
}

func (b *budgetValue) String() string {
	switch {
	case b == nil || (b.n == nil && !b.none):
		return ""
	case b.none:
		return "none"
	}
	return strconv.Itoa(int(*b.n))
}

func (b *budgetValue) Set(s string) error {
	if s == "none" {
		b.n, b.none = nil, true
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 {
		return fmt.Errorf("must be a count of at least 1, or none")
	}
	v := int32(n)
	b.n, b.none = &v, false
	return nil
}

// value is the JSON value of the flag: a count, or nil for "none".
func (b *budgetValue) value() any {
	if b.n == nil {
		return nil
	}
	return *b.n
}

const budgetUsage = "pause the backfill when a run fails while `N` runs have failed (none: no limit)"

func backfillsPatch(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("backfills patch", "backfills patch ID [--max-active-runs N] [--max-failed-runs N|none] [--description TEXT]", &c.g, c.stderr)
	maxActive := fs.Int("max-active-runs", 0, "most runs of the backfill at once, 1..1000; the next claim obeys it")
	var budget budgetValue
	fs.Var(&budget, "max-failed-runs", budgetUsage)
	description := fs.String("description", "", "free text (an empty one clears it)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "backfill ID")
	if err != nil {
		return err
	}
	patch := map[string]any{}
	if isSet(fs, "max-active-runs") {
		patch["max_active_runs"] = *maxActive
	}
	if isSet(fs, "max-failed-runs") {
		patch["max_failed_runs"] = budget.value()
	}
	if isSet(fs, "description") {
		patch["description"] = nil
		if *description != "" {
			patch["description"] = *description
		}
	}
	if len(patch) == 0 {
		return usageErrorf("nothing to change: give --max-active-runs, --max-failed-runs or --description")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	b, err := api.PatchBackfill(ctx, id, patch)
	if err != nil {
		return err
	}
	return c.printBackfill(b)
}

func backfillsRetry(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("backfills retry", "backfills retry ID [flags]", &c.g, c.stderr)
	maxActive := fs.Int("max-active-runs", 0, "most runs at once, 1..1000 (default: the parent's)")
	var budget budgetValue
	fs.Var(&budget, "max-failed-runs", budgetUsage+" (default: the parent's)")
	var conf confValue
	fs.Var(&conf, "dag-run-conf", "a `JSON` object given to every retried run as its conf (default: the parent's)")
	description := fs.String("description", "", "free text (default: the parent's)")
	key := fs.String("idempotency-key", "", "the request's key (default: a random one); it is retried with it after a 503 or a network error")
	ifMatch := fs.String("if-match", "", "create only if the plan still has this `PLAN_HASH`")
	var wf waitFlags
	fs.BoolVar(&wf.wait, "wait", false, "watch the new backfill's progress until it is terminal")
	wf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "backfill ID")
	if err != nil {
		return err
	}
	// Fields left out take the parent's values.
	overrides := map[string]any{}
	if isSet(fs, "max-active-runs") {
		overrides["max_active_runs"] = *maxActive
	}
	if isSet(fs, "max-failed-runs") {
		overrides["max_failed_runs"] = budget.value()
	}
	if conf.conf != nil {
		overrides["dag_run_conf"] = conf.conf
	}
	if isSet(fs, "description") {
		overrides["description"] = *description
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	b, err := api.RetryBackfill(ctx, id, overrides, *key, *ifMatch)
	if err != nil {
		return err
	}
	if !wf.wait {
		return c.printBackfill(b)
	}
	if c.g.output == "table" {
		fmt.Fprintf(c.stdout, "backfill %d created, retrying %d failed or canceled slots of backfill %d\n", b.Id, b.Progress.Total, id)
	}
	return c.watchBackfill(ctx, api, b.Id, wf)
}

// planFlags adds --max-failed-runs and --if-match to create.
type planFlags struct {
	budget  budgetValue
	ifMatch string
}

func (p *planFlags) register(fs *flag.FlagSet) {
	fs.Var(&p.budget, "max-failed-runs", budgetUsage)
	fs.StringVar(&p.ifMatch, "if-match", "", "create only if the plan still has this `PLAN_HASH` (from dry-run)")
}

func (p *planFlags) apply(fs *flag.FlagSet, req *client.BackfillCreate) {
	if isSet(fs, "max-failed-runs") {
		req.MaxFailedRuns = p.budget.n
	}
}

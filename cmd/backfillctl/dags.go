package main

import (
	"context"
	"flag"

	"github.com/backfillsvc/backfill/client"
)

func dagsPut(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("dags put", "dags put DAG_ID --schedule CRON [flags]", &c.g, c.stderr)
	schedule := fs.String("schedule", "", "5-field cron expression or @hourly, @daily, @weekly, @monthly, @yearly (required)")
	timezone := fs.String("timezone", "", "IANA time zone the schedule is evaluated in (server default UTC)")
	maxActive := fs.Int("max-active-runs", 0, "most runs outside backfills at once, 1..1000 (server default 16)")
	paused := fs.Bool("paused", false, "pause the DAG's runs outside backfills")
	description := fs.String("description", "", "free text")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("expected one DAG_ID, got %d arguments", len(pos))
	}
	if *schedule == "" {
		return usageErrorf("--schedule is required")
	}
	body := client.DagPut{Schedule: *schedule, IsPaused: paused}
	setIf(fs, "timezone", &body.Timezone, *timezone)
	setIf(fs, "description", &body.Description, *description)
	if isSet(fs, "max-active-runs") {
		n := int32(*maxActive)
		body.MaxActiveRuns = &n
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	d, _, err := api.PutDag(ctx, pos[0], body)
	if err != nil {
		return err
	}
	return c.printDags(d)
}

func dagsGet(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("dags get", "dags get DAG_ID", &c.g, c.stderr)
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
	d, err := api.GetDag(ctx, pos[0])
	if err != nil {
		return err
	}
	return c.printDags(d)
}

func dagsList(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("dags list", "dags list [--limit N] [--offset N]", &c.g, c.stderr)
	limit := fs.Int("limit", 50, "page size, 1..1000")
	offset := fs.Int("offset", 0, "entries to skip")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	l, err := api.ListDags(ctx, &client.ListDagsParams{Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	if err := c.printDags(l.Dags...); err != nil {
		return err
	}
	c.printPage(len(l.Dags), *offset, l.TotalEntries)
	return nil
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// setIf points *dst at v when the flag was given, so that an absent flag takes the
// server's default.
func setIf(fs *flag.FlagSet, name string, dst **string, v string) {
	if isSet(fs, name) {
		*dst = &v
	}
}

package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/backfillsvc/backfill/client"
)

var dagColumns = columns[client.Dag]{
	header: []string{"DAG_ID", "SCHEDULE", "TIMEZONE", "MAX_ACTIVE_RUNS", "PAUSED", "DESCRIPTION"},
	row: func(d client.Dag) []string {
		return []string{d.DagId, d.Schedule, d.Timezone, fmt.Sprint(d.MaxActiveRuns), fmt.Sprint(d.IsPaused), deref(d.Description)}
	},
}

var dagsPut = do(dagID, func(fs *flag.FlagSet) action[string] {
	schedule := fs.String("schedule", "", "5-field cron expression or @hourly, @daily, @weekly, @monthly, @yearly (required)")
	timezone := fs.String("timezone", "", "IANA time zone the schedule is evaluated in (server default UTC)")
	maxActive := fs.Int("max-active-runs", 0, "most runs outside backfills at once, 1..1000 (server default 16)")
	paused := fs.Bool("paused", false, "pause the DAG's runs outside backfills")
	description := fs.String("description", "", "free text")
	return func(ctx context.Context, c *cli, api *client.Client, id string) error {
		if *schedule == "" {
			return usageErrorf("--schedule is required")
		}
		body := client.DagPut{Schedule: *schedule, IsPaused: paused}
		setIf(fs, "timezone", &body.Timezone, *timezone)
		setIf(fs, "description", &body.Description, *description)
		setIf(fs, "max-active-runs", &body.MaxActiveRuns, int32(*maxActive))
		d, _, err := api.PutDag(ctx, id, body)
		if err != nil {
			return err
		}
		return showOne(dagColumns)(c, d)
	}
})

var dagsList = list(listing[struct{}, client.DagCollection, client.Dag]{
	arg: none, cols: dagColumns,
	read: func(ctx context.Context, api *client.Client, _ struct{}, pg *pageFlags) (client.DagCollection, error) {
		return api.ListDags(ctx, &client.ListDagsParams{Limit: pg.limitP, Offset: pg.offsetP})
	},
	page: func(l client.DagCollection) page[client.Dag] {
		return page[client.Dag]{items: l.Dags, total: l.TotalEntries}
	},
})

var dagsDelete = remove(dagID, (*client.Client).DeleteDag, func(c *cli, id string) error {
	_, err := fmt.Fprintf(c.stdout, "DAG %s deleted with its runs and backfill history\n", id)
	return err
})

package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/backfillsvc/backfill/client"
)

var dagColumns = columns[client.Dag]{
	header: []string{"DAG_ID", "SCHEDULE", "TIMEZONE", "MAX_ACTIVE_RUNS", "PAUSED", "UPSTREAMS", "DESCRIPTION"},
	row: func(d client.Dag) []string {
		return []string{d.DagId, d.Schedule, d.Timezone, fmt.Sprint(d.MaxActiveRuns), fmt.Sprint(d.IsPaused),
			upstreamsText(d.Upstreams), deref(d.Description)}
	},
}

// upstreamsText is a DAG's upstreams as --upstream takes them, comma-separated ("-" for none).
func upstreamsText(ups []client.DagUpstream) string {
	if len(ups) == 0 {
		return "-"
	}
	parts := make([]string, len(ups))
	for i, u := range ups {
		parts[i] = u.DagId
		if u.Mapping != client.DependencyMappingOverlap || u.Lookback != 0 {
			parts[i] += ":" + string(u.Mapping)
		}
		if u.Lookback != 0 {
			parts[i] += ":" + strconv.Itoa(int(u.Lookback))
		}
	}
	return strings.Join(parts, ",")
}

// upstreamFlag reads repeated --upstream DAG_ID[:MAPPING[:LOOKBACK]] flags.
type upstreamFlag []client.DagUpstreamPut

func (f *upstreamFlag) String() string { return "" }

func (f *upstreamFlag) Set(v string) error {
	parts := strings.Split(v, ":")
	if len(parts) > 3 || parts[0] == "" {
		return fmt.Errorf("want DAG_ID[:overlap|all[:LOOKBACK]], got %q", v)
	}
	u := client.DagUpstreamPut{DagId: parts[0]}
	if len(parts) > 1 {
		m := client.DependencyMapping(parts[1])
		if m != client.DependencyMappingOverlap && m != client.DependencyMappingAll {
			return fmt.Errorf("mapping %q: want overlap or all", parts[1])
		}
		u.Mapping = &m
	}
	if len(parts) > 2 {
		n, err := strconv.ParseInt(parts[2], 10, 32)
		if err != nil {
			return fmt.Errorf("lookback %q: want a whole number", parts[2])
		}
		lookback := int32(n)
		u.Lookback = &lookback
	}
	*f = append(*f, u)
	return nil
}

var dagsPut = do(dagID, func(fs *flag.FlagSet) action[string] {
	schedule := fs.String("schedule", "", "5-field cron expression or @hourly, @daily, @weekly, @monthly, @yearly (required)")
	timezone := fs.String("timezone", "", "IANA time zone the schedule is evaluated in (server default UTC)")
	maxActive := fs.Int("max-active-runs", 0, "most runs outside backfills at once, 1..1000 (server default 16)")
	paused := fs.Bool("paused", false, "pause the DAG's runs outside backfills")
	description := fs.String("description", "", "free text")
	var upstreams upstreamFlag
	fs.Var(&upstreams, "upstream", "a DAG this one depends on, as DAG_ID[:overlap|all[:LOOKBACK]]; repeat for more (a put replaces them)")
	dependsOnPast := fs.Bool("depends-on-past", false, "in a backfill group each run also waits for the DAG's previous slot")
	return func(ctx context.Context, c *cli, api *client.Client, id string) error {
		if *schedule == "" {
			return usageErrorf("--schedule is required")
		}
		body := client.DagPut{Schedule: *schedule, IsPaused: paused, DependsOnPast: dependsOnPast}
		if len(upstreams) > 0 {
			body.Upstreams = (*[]client.DagUpstreamPut)(&upstreams)
		}
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

package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/backfillsvc/backfill/client"
)

const poolsUsage = `Pools (a limit on running runs shared by the backfills that name it):
  pools put NAME --slots N [--rate N/PER] [--description TEXT]
        Create a pool, or replace its settings. Lowering --slots stops nothing that runs.
        --rate 5/minute paces it: at most 5 starts in any minute (PER: second, minute,
        hour); without --rate the pool has no pace.
  pools get NAME
  pools list [--limit N] [--offset N]
        Slots, running and queued runs of each pool.
  pools delete NAME
        Refused (pool_in_use) while an active backfill or an unfinished run names it.
`

var (
	poolName    = word("pool NAME")
	poolColumns = columns[client.Pool]{
		header: []string{"NAME", "SLOTS", "RUNNING", "QUEUED", "RATE", "NEXT START", "DESCRIPTION"},
		row: func(p client.Pool) []string {
			rate, next := "-", "-"
			if p.Rate != nil {
				rate = fmt.Sprintf("%d/%s", p.Rate.Runs, p.Rate.Per)
			}
			if p.NextStartAt != nil {
				next = instant(*p.NextStartAt)
			}
			return []string{p.Name, fmt.Sprint(p.Slots), fmt.Sprint(p.Running), fmt.Sprint(p.Queued), rate, next, deref(p.Description)}
		},
	}
)

var poolsPut = do(poolName, func(fs *flag.FlagSet) action[string] {
	slots := fs.Int("slots", 0, "most runs of the pool running at once, 1..100000 (required)")
	description := fs.String("description", "", "free text")
	rate := fs.String("rate", "", "pace: at most N starts per second, minute or hour, as N/PER (5/minute)")
	return func(ctx context.Context, c *cli, api *client.Client, name string) error {
		if !isSet(fs, "slots") {
			return usageErrorf("--slots is required")
		}
		body := client.PoolPut{Slots: int32(*slots)}
		if *rate != "" {
			r, err := parseRate(*rate)
			if err != nil {
				return err
			}
			body.Rate = &r
		}
		setIf(fs, "description", &body.Description, *description)
		p, _, err := api.PutPool(ctx, name, body)
		if err != nil {
			return err
		}
		return showOne(poolColumns)(c, p)
	}
})

var poolsList = list(listing[struct{}, client.PoolCollection, client.Pool]{
	arg: none, cols: poolColumns,
	read: func(ctx context.Context, api *client.Client, _ struct{}, pg *pageFlags) (client.PoolCollection, error) {
		return api.ListPools(ctx, &client.ListPoolsParams{Limit: pg.limitP, Offset: pg.offsetP})
	},
	page: func(l client.PoolCollection) page[client.Pool] {
		return page[client.Pool]{items: l.Pools, total: l.TotalEntries}
	},
})

var poolsDelete = remove(poolName, (*client.Client).DeletePool, func(c *cli, name string) error {
	if c.g.output == "json" {
		return c.printJSON(map[string]any{"deleted": name})
	}
	_, err := fmt.Fprintf(c.stdout, "pool %s deleted\n", name)
	return err
})

// parseRate reads --rate's N/PER. The service checks N's range (400 names the field).
func parseRate(s string) (client.PoolRate, error) {
	n, per, ok := strings.Cut(s, "/")
	runs, err := strconv.ParseInt(n, 10, 32)
	p := client.PoolRatePer(per)
	if !ok || err != nil || (p != client.PoolRatePerSecond && p != client.PoolRatePerMinute && p != client.PoolRatePerHour) {
		return client.PoolRate{}, usageErrorf("--rate %q: want N/second, N/minute or N/hour", s)
	}
	return client.PoolRate{Runs: int32(runs), Per: p}, nil
}

package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/backfillsvc/backfill/client"
)

const poolsUsage = `Pools (a limit on running runs shared by the backfills that name it):
  pools put NAME --slots N [--description TEXT]
        Create a pool, or replace its settings. Lowering --slots stops nothing that runs.
  pools get NAME
  pools list [--limit N] [--offset N]
        Slots, running and queued runs of each pool.
  pools delete NAME
        Refused (pool_in_use) while an active backfill or an unfinished run names it.
`

var (
	poolName    = word("pool NAME")
	poolColumns = columns[client.Pool]{
		header: []string{"NAME", "SLOTS", "RUNNING", "QUEUED", "DESCRIPTION"},
		row: func(p client.Pool) []string {
			return []string{p.Name, fmt.Sprint(p.Slots), fmt.Sprint(p.Running), fmt.Sprint(p.Queued), deref(p.Description)}
		},
	}
)

var poolsPut = do(poolName, func(fs *flag.FlagSet) action[string] {
	slots := fs.Int("slots", 0, "most runs of the pool running at once, 1..100000 (required)")
	description := fs.String("description", "", "free text")
	return func(ctx context.Context, c *cli, api *client.Client, name string) error {
		if !isSet(fs, "slots") {
			return usageErrorf("--slots is required")
		}
		body := client.PoolPut{Slots: int32(*slots)}
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

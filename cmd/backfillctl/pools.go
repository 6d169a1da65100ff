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

func poolsPut(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("pools put", "pools put NAME --slots N [--description TEXT]", &c.g, c.stderr)
	slots := fs.Int("slots", 0, "most runs of the pool running at once, 1..100000 (required)")
	description := fs.String("description", "", "free text")
	name, err := onePoolName(fs, args)
	if err != nil {
		return err
	}
	if !isSet(fs, "slots") {
		return usageErrorf("--slots is required")
	}
	body := client.PoolPut{Slots: int32(*slots)}
	setIf(fs, "description", &body.Description, *description)
	api, err := c.client()
	if err != nil {
		return err
	}
	p, _, err := api.PutPool(ctx, name, body)
	if err != nil {
		return err
	}
	return c.printPools(p)
}

func poolsGet(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("pools get", "pools get NAME", &c.g, c.stderr)
	name, err := onePoolName(fs, args)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	p, err := api.GetPool(ctx, name)
	if err != nil {
		return err
	}
	return c.printPools(p)
}

func poolsList(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("pools list", "pools list [--limit N] [--offset N]", &c.g, c.stderr)
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
	l, err := api.ListPools(ctx, &client.ListPoolsParams{Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(l)
	}
	if err := c.printPools(l.Pools...); err != nil {
		return err
	}
	c.printPage(len(l.Pools), *offset, l.TotalEntries)
	return nil
}

func poolsDelete(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("pools delete", "pools delete NAME", &c.g, c.stderr)
	name, err := onePoolName(fs, args)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if err := api.DeletePool(ctx, name); err != nil {
		return err
	}
	if c.g.output == "json" {
		return c.printJSON(map[string]any{"deleted": name})
	}
	fmt.Fprintf(c.stdout, "pool %s deleted\n", name)
	return nil
}

// onePoolName parses a command that takes exactly one pool NAME.
func onePoolName(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usageErrorf("expected one pool NAME, got %d arguments", len(pos))
	}
	return pos[0], nil
}

func (c *cli) printPools(ps ...client.Pool) error {
	if c.g.output == "json" && len(ps) == 1 {
		return c.printJSON(ps[0])
	}
	rows := [][]string{{"NAME", "SLOTS", "RUNNING", "QUEUED", "DESCRIPTION"}}
	for _, p := range ps {
		rows = append(rows, []string{p.Name, fmt.Sprint(p.Slots), fmt.Sprint(p.Running), fmt.Sprint(p.Queued), deref(p.Description)})
	}
	return c.table(rows)
}

package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"

	"github.com/backfillsvc/backfill/client"
)

var runColumns = columns[client.DagRun]{
	header: []string{"ID", "RUN_ID", "LOGICAL_DATE", "STATE", "ATTEMPT", "WORKER", "BACKFILL", "NOTE"},
	row: func(r client.DagRun) []string {
		backfill := "-"
		if r.BackfillId != nil {
			backfill = strconv.FormatInt(*r.BackfillId, 10)
		}
		return []string{fmt.Sprint(r.Id), r.RunId, instant(r.LogicalDate), string(r.State), fmt.Sprint(r.Attempt),
			deref(r.WorkerId), backfill, oneLine(deref(r.Note))}
	},
}

var showRun = showOne(runColumns)

// runStateFlag registers --state of the run listings: usage says what it filters.
func runStateFlag(fs *flag.FlagSet, usage string) func() (*client.DagRunState, error) {
	state := fs.String("state", "", usage+": queued, running, success, failed or canceled")
	return func() (*client.DagRunState, error) {
		if !isSet(fs, "state") {
			return nil, nil
		}
		s, err := enum("state", *state, client.DagRunStates())
		return &s, err
	}
}

var runsList = list(listing[string, client.DagRunCollection, client.DagRun]{
	arg: dagID, cursors: true, cols: runColumns,
	flags: func(fs *flag.FlagSet, pg *pageFlags) func(context.Context, *client.Client, string) (client.DagRunCollection, error) {
		state := runStateFlag(fs, "only runs in this state")
		backfillID := fs.Int64("backfill-id", 0, "only runs this backfill owns")
		return func(ctx context.Context, api *client.Client, dag string) (client.DagRunCollection, error) {
			params := client.ListDagRunsParams{Limit: pg.limitP, Offset: pg.offsetP, Cursor: pg.cursorP}
			var err error
			if params.State, err = state(); err != nil {
				return client.DagRunCollection{}, err
			}
			setIf(fs, "backfill-id", &params.BackfillId, *backfillID)
			return api.ListDagRuns(ctx, dag, &params)
		}
	},
	page: func(l client.DagRunCollection) page[client.DagRun] {
		return page[client.DagRun]{items: l.DagRuns, total: l.TotalEntries, next: l.NextCursor}
	},
})

var runsGet = get(dagRun, func(api *client.Client, ctx context.Context, r runName) (client.DagRun, error) {
	return api.GetDagRun(ctx, r.dagID, r.runID)
}, showRun)

var runsClaim = do(none, func(fs *flag.FlagSet) action[struct{}] {
	worker := fs.String("worker-id", "", "the worker that takes the runs (required)")
	dag := fs.String("dag-id", "", "only runs of this DAG")
	limit := fs.Int("limit", 1, "most runs to take")
	lease := fs.Int("lease-seconds", 0, "lease length; heartbeat before it ends (server default if not given)")
	return func(ctx context.Context, c *cli, api *client.Client, _ struct{}) error {
		if *worker == "" {
			return usageErrorf("--worker-id is required")
		}
		req := client.ClaimRequest{WorkerId: *worker, Limit: limit}
		setIf(fs, "dag-id", &req.DagId, *dag)
		setIf(fs, "lease-seconds", &req.LeaseSeconds, *lease)
		runs, err := api.ClaimRuns(ctx, req, client.KeyOptions{})
		if err != nil {
			return err
		}
		if c.g.output == "json" {
			return c.printJSON(runs)
		}
		if len(runs) == 0 {
			_, err := fmt.Fprintln(c.stdout, "no runs to claim")
			return err
		}
		return showTable(c, runColumns, runs)
	}
})

// leased declares a command on a run the worker holds by its numeric id: heartbeat, release.
func leased[T any](f func(api *client.Client, ctx context.Context, id int64, workerID string) (T, error), show func(*cli, int64, T) error) runFunc {
	return do(runID, func(fs *flag.FlagSet) action[int64] {
		worker := fs.String("worker-id", "", "the worker that holds the lease (required)")
		return func(ctx context.Context, c *cli, api *client.Client, id int64) error {
			if *worker == "" {
				return usageErrorf("--worker-id is required")
			}
			v, err := f(api, ctx, id, *worker)
			if err != nil {
				return err
			}
			return show(c, id, v)
		}
	})
}

var runsHeartbeat = leased((*client.Client).HeartbeatRun, func(c *cli, id int64, h client.HeartbeatResponse) error {
	if c.g.output == "json" {
		return c.printJSON(h)
	}
	_, err := fmt.Fprintf(c.stdout, "run %d: lease extended\n", id)
	return err
})

var runsRelease = leased((*client.Client).ReleaseRun, func(c *cli, _ int64, r client.DagRun) error { return showRun(c, r) })

var runsReport = do(dagRun, func(fs *flag.FlagSet) action[runName] {
	state := fs.String("state", "", "the outcome: success, failed or canceled (required)")
	worker := fs.String("worker-id", "", "the worker that holds the lease; without it, the run is marked as an operator would")
	note := fs.String("note", "", "why (kept on the run; shown by 'backfills runs')")
	return func(ctx context.Context, c *cli, api *client.Client, run runName) error {
		outcome, err := enum("state", *state, slices.DeleteFunc(client.DagRunStates(), func(s client.DagRunState) bool { return !s.Terminal() }))
		if err != nil {
			return err
		}
		r, err := api.ReportRun(ctx, run.dagID, run.runID, client.RunReport{State: outcome, WorkerID: *worker, Note: *note})
		if err != nil {
			return err
		}
		return showRun(c, r)
	}
})

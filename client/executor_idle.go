package client

import (
	"context"
	"errors"
	"net/http"
)

// idleEverywhere reports whether no run within cfg's filters is queued or running on any
// worker: what UntilIdle waits for. A claim that finds nothing is not enough: the runs may
// wait behind a slot another worker holds (a max_active_runs, a pool's slots, an upstream
// run), and this worker may be the one meant to run them once the slot frees.
//
// It reads what the service already answers: a pool's queued and running counts, and a DAG's
// runs filtered by state. With both a DAG and a pool it answers idle when either is idle (the
// runs in both are then none); when both have work it waits, even if that work is all other
// DAGs' runs in the pool or the DAG's runs outside it. With neither, it reads every DAG.
func (c *Client) idleEverywhere(ctx context.Context, cfg ExecutorConfig) (bool, error) {
	if cfg.Pool != "" {
		p, err := c.GetPool(ctx, cfg.Pool)
		switch {
		case isNotFound(err):
			return true, nil // no pool, no run in it
		case err != nil:
			return false, err
		case p.Queued+p.Running == 0:
			return true, nil
		case cfg.DagID == "":
			return false, nil
		}
	}
	if cfg.DagID != "" {
		return c.dagIdle(ctx, cfg.DagID)
	}
	p := ListDagsParams{Limit: Ptr(Limit(100))}
	for d, err := range paged(func() ([]Dag, *string, error) {
		l, err := c.ListDags(ctx, &p)
		return l.Dags, l.NextCursor, err
	}, func(next *string) { p.Cursor = next }) {
		if err != nil {
			return false, err
		}
		if idle, err := c.dagIdle(ctx, d.DagId); err != nil || !idle {
			return false, err
		}
	}
	return true, nil
}

// dagIdle reports whether the DAG has no queued and no running run.
func (c *Client) dagIdle(ctx context.Context, dagID string) (bool, error) {
	for _, state := range []DagRunState{DagRunStateQueued, DagRunStateRunning} {
		l, err := c.ListDagRuns(ctx, dagID, &ListDagRunsParams{State: &state, Limit: Ptr(Limit(1))})
		switch {
		case isNotFound(err):
			return true, nil // a DAG deleted meanwhile has no runs
		case err != nil:
			return false, err
		case len(l.DagRuns) > 0:
			return false, nil
		}
	}
	return true, nil
}

func isNotFound(err error) bool {
	var p *ProblemError
	return errors.As(err, &p) && p.Status == http.StatusNotFound
}

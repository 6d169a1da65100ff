package main

import (
	"context"

	"github.com/backfillsvc/backfill/metrics"
	"github.com/backfillsvc/backfill/repo"
)

// poolCounter adapts the store's pools to the metrics package's figures, so that neither
// package depends on the other.
func poolCounter(store *repo.Store) metrics.PoolCounter {
	return func(ctx context.Context) (map[string]metrics.PoolFigures, error) {
		pools, err := store.PoolFigures(ctx)
		if err != nil {
			return nil, err
		}
		out := make(map[string]metrics.PoolFigures, len(pools))
		for _, p := range pools {
			out[p.Name] = metrics.PoolFigures{Slots: int64(p.Slots), Running: int64(p.Running), Queued: int64(p.Queued), PacedOut: p.NextStartAt != nil}
		}
		return out, nil
	}
}

package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolFigures are one pool's slots and runs at a scrape.
type PoolFigures struct {
	Slots, Running, Queued int64
	// PacedOut: the pool's pace is used up, so claims start none of its runs until its next
	// start.
	PacedOut bool
}

// PoolCounter reads every pool's figures, by pool name.
type PoolCounter func(ctx context.Context) (map[string]PoolFigures, error)

// WatchPools registers per-pool gauges of slots, running and queued runs, read through
// count on each scrape. An operator alerts on running near slots with queued growing (a pool
// too small), or on queued runs in a pool with no room for long.
func (m *Metrics) WatchPools(count PoolCounter) {
	labels := []string{"pool"}
	slots := prometheus.NewDesc("backfill_pool_slots", "A pool's slots: the most of its runs a claim lets run at once.", labels, nil)
	running := prometheus.NewDesc("backfill_pool_running", "Runs of the pool running now.", labels, nil)
	queued := prometheus.NewDesc("backfill_pool_queued", "Runs of the pool waiting to be claimed.", labels, nil)
	pacedOut := prometheus.NewDesc("backfill_pool_paced_out", "1 while the pool's pace is used up (claims start none of its runs until its next_start_at), else 0.", labels, nil)
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		pools, err := count(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]prometheus.Metric, 0, 4*len(pools))
		for name, f := range pools {
			paced := int64(0)
			if f.PacedOut {
				paced = 1
			}
			out = append(out, gauge(slots, f.Slots, name), gauge(running, f.Running, name), gauge(queued, f.Queued, name),
				gauge(pacedOut, paced, name))
		}
		return out, nil
	}
	m.watchScrape(prometheus.CounterOpts{
		Name: "backfill_pool_gauge_errors_total",
		Help: "Scrapes whose pool gauges could not be read from the database.",
	}, read, slots, running, queued, pacedOut)
}

package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// StateCounter reads how many backfills and runs are in each active state.
type StateCounter func(ctx context.Context) (backfills, runs map[string]int64, err error)

// WatchStates registers gauges of active backfills by state and unfinished runs by state,
// read through count on each scrape.
func (m *Metrics) WatchStates(count StateCounter) {
	backfills := prometheus.NewDesc("backfill_backfills_active",
		"Active backfills by state (running, paused, canceling).", []string{"state"}, nil)
	runs := prometheus.NewDesc("backfill_runs_unfinished",
		"Unfinished runs by state (queued, running), in backfills and outside.", []string{"state"}, nil)
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		backfillCounts, runCounts, err := count(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]prometheus.Metric, 0, len(backfillCounts)+len(runCounts))
		for state, n := range backfillCounts {
			out = append(out, gauge(backfills, n, state))
		}
		for state, n := range runCounts {
			out = append(out, gauge(runs, n, state))
		}
		return out, nil
	}
	m.watchScrape(prometheus.CounterOpts{
		Name: "backfill_state_gauge_errors_total",
		Help: "Scrapes whose active-state gauges could not be read from the database.",
	}, read, backfills, runs)
}

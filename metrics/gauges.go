package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StateCounter reads how many backfills and runs are in each active state.
type StateCounter func(ctx context.Context) (backfills, runs map[string]int64, err error)

// stateGauges reads the database at scrape time, so that every replica reports the same,
// current figures without a background loop. A scrape that cannot read them reports none
// of these series (rather than stale ones) and counts the failure.
type stateGauges struct {
	count     StateCounter
	timeout   time.Duration
	backfills *prometheus.Desc
	runs      *prometheus.Desc
	failures  prometheus.Counter
}

// WatchStates registers gauges of active backfills by state and unfinished runs by state,
// read through count on each scrape.
func (m *Metrics) WatchStates(count StateCounter) {
	g := &stateGauges{
		count:   count,
		timeout: 2 * time.Second,
		backfills: prometheus.NewDesc("backfill_backfills_active",
			"Active backfills by state (running, paused, canceling).", []string{"state"}, nil),
		runs: prometheus.NewDesc("backfill_runs_unfinished",
			"Unfinished runs by state (queued, running), in backfills and outside.", []string{"state"}, nil),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_state_gauge_errors_total",
			Help: "Scrapes whose active-state gauges could not be read from the database.",
		}),
	}
	m.registry.MustRegister(g, g.failures)
}

func (g *stateGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.backfills
	ch <- g.runs
}

func (g *stateGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	backfills, runs, err := g.count(ctx)
	if err != nil {
		g.failures.Inc()
		return
	}
	for state, n := range backfills {
		ch <- prometheus.MustNewConstMetric(g.backfills, prometheus.GaugeValue, float64(n), state)
	}
	for state, n := range runs {
		ch <- prometheus.MustNewConstMetric(g.runs, prometheus.GaugeValue, float64(n), state)
	}
}

package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolFigures are one pool's slots and runs at a scrape.
type PoolFigures struct {
	Slots, Running, Queued int64
}

// PoolCounter reads every pool's figures, by pool name.
type PoolCounter func(ctx context.Context) (map[string]PoolFigures, error)

// poolGauges read the pools at scrape time, like stateGauges: every replica reports the same,
// current figures, and a scrape that cannot read them reports none (and counts the failure).
type poolGauges struct {
	count                  PoolCounter
	timeout                time.Duration
	slots, running, queued *prometheus.Desc
	failures               prometheus.Counter
}

// WatchPools registers per-pool gauges of slots, running and queued runs, read through
// count on each scrape. An operator alerts on running near slots with queued growing (a pool
// too small), or on queued runs in a pool with no room for long.
func (m *Metrics) WatchPools(count PoolCounter) {
	labels := []string{"pool"}
	g := &poolGauges{
		count:   count,
		timeout: 2 * time.Second,
		slots:   prometheus.NewDesc("backfill_pool_slots", "A pool's slots: the most of its runs a claim lets run at once.", labels, nil),
		running: prometheus.NewDesc("backfill_pool_running", "Runs of the pool running now.", labels, nil),
		queued:  prometheus.NewDesc("backfill_pool_queued", "Runs of the pool waiting to be claimed.", labels, nil),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_pool_gauge_errors_total",
			Help: "Scrapes whose pool gauges could not be read from the database.",
		}),
	}
	m.registry.MustRegister(g, g.failures)
}

func (g *poolGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.slots
	ch <- g.running
	ch <- g.queued
}

func (g *poolGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	pools, err := g.count(ctx)
	if err != nil {
		g.failures.Inc()
		return
	}
	for name, f := range pools {
		ch <- prometheus.MustNewConstMetric(g.slots, prometheus.GaugeValue, float64(f.Slots), name)
		ch <- prometheus.MustNewConstMetric(g.running, prometheus.GaugeValue, float64(f.Running), name)
		ch <- prometheus.MustNewConstMetric(g.queued, prometheus.GaugeValue, float64(f.Queued), name)
	}
}

package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrapeTimeout bounds one scrape's read of the database.
const scrapeTimeout = 2 * time.Second

// scrapeGauges are gauges read from the database at scrape time, so that every replica
// reports the same, current figures without a background loop. A scrape that cannot read
// them reports none of their series (rather than stale ones) and counts the failure.
type scrapeGauges struct {
	descs    []*prometheus.Desc
	read     func(ctx context.Context) ([]prometheus.Metric, error)
	failures prometheus.Counter
}

// watchScrape registers gauges of descs that read answers on each scrape, and the counter
// failures of the scrapes it could not answer.
func (m *Metrics) watchScrape(failures prometheus.CounterOpts, read func(ctx context.Context) ([]prometheus.Metric, error), descs ...*prometheus.Desc) {
	g := &scrapeGauges{descs: descs, read: read, failures: prometheus.NewCounter(failures)}
	m.registry.MustRegister(g, g.failures)
}

func (g *scrapeGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range g.descs {
		ch <- d
	}
}

func (g *scrapeGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	gauges, err := g.read(ctx)
	if err != nil {
		g.failures.Inc()
		return
	}
	for _, m := range gauges {
		ch <- m
	}
}

// gauge is one labelled value of desc at this scrape.
func gauge(desc *prometheus.Desc, v int64, label string) prometheus.Metric {
	return prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), label)
}

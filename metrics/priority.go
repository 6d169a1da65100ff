package metrics

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// PriorityCounter reads the queued runs of running backfills by the backfills' priority.
type PriorityCounter func(ctx context.Context) (map[int]int64, error)

// WatchPriorities registers backfill_queued_runs_by_priority, read through count on each
// scrape. Its label has one value per priority the service accepts (−10..10): 21 series at
// most, however many backfills there are.
func (m *Metrics) WatchPriorities(count PriorityCounter) {
	queued := prometheus.NewDesc("backfill_queued_runs_by_priority",
		"Queued runs of running backfills by the backfill's priority (-10..10).", []string{"priority"}, nil)
	read := func(ctx context.Context) ([]prometheus.Metric, error) {
		byPriority, err := count(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]prometheus.Metric, 0, len(byPriority))
		for p, n := range byPriority {
			out = append(out, gauge(queued, n, strconv.Itoa(p)))
		}
		return out, nil
	}
	m.watchScrape(prometheus.CounterOpts{
		Name: "backfill_priority_gauge_errors_total",
		Help: "Scrapes whose queued-runs-by-priority gauge could not be read from the database.",
	}, read, queued)
}

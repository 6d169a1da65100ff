// Package exported lists the metric names the backfill service exports, as a scrape shows
// them (histograms as their _bucket, _sum and _count series), so that the alerts and the
// dashboard can be checked against them.
package exported

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/metrics"
	"github.com/go-chi/chi/v5"
)

// Names scrapes a metrics.Metrics whose every collector has been given a value: a vector
// with no child yet is absent from a scrape, so each observer method is called once. A
// collector added to the metrics package and not exercised here makes a panel or rule that
// names it fail, never pass wrongly.
func Names() (map[string]bool, error) {
	m := metrics.New()
	m.WatchStates(func(context.Context) (map[string]int64, map[string]int64, error) {
		return map[string]int64{"running": 1}, map[string]int64{"queued": 1}, nil
	})
	m.WatchPools(func(context.Context) (map[string]metrics.PoolFigures, error) {
		return map[string]metrics.PoolFigures{"warehouse": {}}, nil
	})
	m.TxRetried()
	m.BackfillCreated("running")
	m.BackfillFinalized("succeeded")
	m.RunsClaimed(1)
	m.LeasesExpired(1)
	m.SweepPassed(time.Millisecond, errors.New("failed pass"))
	m.WebhookAttempted("delivered")
	m.WebhookDelivered(time.Second)
	m.EventRead(time.Millisecond)
	m.EventsWritten("backfill.created", 1)
	m.StreamsOpen(1)
	m.StreamRejected()
	m.OutcomeUnknown()
	m.Admitted("claim", time.Millisecond)
	m.Shed("claim", time.Millisecond)
	m.Waiting("claim", 1)
	m.InFlight("claim", 1)

	r := chi.NewRouter()
	r.Use(m.Instrument)
	r.Get("/healthz", func(http.ResponseWriter, *http.Request) {})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return nil, errors.New("metrics handler answered " + rec.Result().Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, sc.Err()
}

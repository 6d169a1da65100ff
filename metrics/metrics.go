// Package metrics exposes what an operator alerts on, in Prometheus form.
package metrics

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the service's collectors in a registry of its own, so that tests can build
// several without clashing on the global one.
type Metrics struct {
	registry           *prometheus.Registry
	backfillsCreated   *prometheus.CounterVec
	backfillsFinalized *prometheus.CounterVec
	runsClaimed        prometheus.Counter
	leasesExpired      prometheus.Counter
	runsDeferred       *prometheus.CounterVec
	txRetries          prometheus.Counter
	sweepDuration      prometheus.Histogram
	sweepErrors        prometheus.Counter
	httpRequests       *prometheus.CounterVec
	httpDuration       *prometheus.HistogramVec
	webhookAttempts    *prometheus.CounterVec
	webhookLag         prometheus.Histogram
	eventsWritten      *prometheus.CounterVec
	eventLag           prometheus.Histogram
	eventStreams       prometheus.Gauge
	streamsRejected    prometheus.Counter
	outcomeUnknown     prometheus.Counter
	admitted           *prometheus.CounterVec
	shed               *prometheus.CounterVec
	admissionWait      *prometheus.HistogramVec
	shedWait           *prometheus.HistogramVec
	waiting            *prometheus.GaugeVec
	inFlight           *prometheus.GaugeVec

	routes  childCache[routeKey, routeChildren]
	classes childCache[string, classChildren]
}

// New registers every collector.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		backfillsCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_backfills_created_total",
			Help: "Backfills created, by the state they were created in.",
		}, []string{"state"}),
		backfillsFinalized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_backfills_finalized_total",
			Help: "Backfills that reached a terminal state after creation, by that state.",
		}, []string{"state"}),
		runsClaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_runs_claimed_total",
			Help: "Runs handed to workers by claims.",
		}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_leases_expired_total",
			Help: "Runs whose lease expired before their worker reported.",
		}),
		runsDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_runs_deferred_total",
			Help: "Runs handed back by a report of deferred (their system asked for a pause), by DAG.",
		}, []string{"dag_id"}),
		txRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_tx_retries_total",
			Help: "Transactions run again after a serialization failure or deadlock.",
		}),
		sweepDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backfill_sweep_duration_seconds",
			Help:    "Duration of one sweep pass.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		sweepErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_sweep_errors_total",
			Help: "Sweep passes that ended in an error.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_http_requests_total",
			Help: "HTTP requests by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "backfill_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_admission_admitted_total",
			Help: "Requests admitted, by admission class (heartbeat, lease, claim, default).",
		}, []string{"class"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_admission_shed_total",
			Help: "Requests answered 503 busy because no slot freed up within ADMISSION_WAIT, by class.",
		}, []string{"class"}),
		admissionWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "backfill_admission_wait_seconds",
			Help:    "Time admitted requests waited for their slot, by class.",
			Buckets: []float64{0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
		}, []string{"class"}),
		// shedWait is the service's side of "a 503 comes within ADMISSION_WAIT": from the
		// moment a request has been read to its 503. A client sees more when the machine is
		// too busy to read its request at once; this shows which side the wait was on.
		shedWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "backfill_admission_shed_wait_seconds",
			Help:    "Time shed requests waited, from being read to their 503, by class.",
			Buckets: []float64{0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}, []string{"class"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backfill_admission_waiting",
			Help: "Requests waiting for an admission slot now, by class.",
		}, []string{"class"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backfill_admission_in_flight",
			Help: "Admitted requests being served now, by class.",
		}, []string{"class"}),
		webhookAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_webhook_deliveries_total",
			Help: "Webhook delivery attempts by outcome: delivered, retry (failed, tried again later), gave_up (failed, the last attempt).",
		}, []string{"outcome"}),
		webhookLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backfill_webhook_delivery_lag_seconds",
			Help:    "From an event's occurred_at to its delivery (a 2xx answer), retries included.",
			Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 28800, 86400},
		}),
		eventsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backfill_events_written_total",
			Help: "Lifecycle events written to the outbox, by type, counted once by the replica whose webhook fan-out took them (aggregate with sum).",
		}, []string{"type"}),
		eventLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backfill_event_listener_lag_seconds",
			Help:    "Time from an event's transaction to this replica's listener reading it for its streams (a replica without streams reads none).",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 8),
		}),
		eventStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backfill_event_streams",
			Help: "Server-Sent Events streams open on this replica.",
		}),
		outcomeUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_outcome_unknown_total",
			Help: "Changes answered 503 outcome_unknown: the database session died after the change was sent, so it may or may not have been applied.",
		}),
		streamsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backfill_event_streams_rejected_total",
			Help: "Event streams refused (503 busy) because this replica had as many open as it allows.",
		}),
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.backfillsCreated, m.backfillsFinalized, m.runsClaimed, m.leasesExpired, m.runsDeferred, m.txRetries,
		m.sweepDuration, m.sweepErrors, m.httpRequests, m.httpDuration,
		m.webhookAttempts, m.webhookLag,
		m.eventsWritten, m.eventLag, m.eventStreams, m.streamsRejected, m.outcomeUnknown,
		m.admitted, m.shed, m.admissionWait, m.shedWait, m.waiting, m.inFlight,
	)
	return m
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// Instrument counts requests by chi route pattern (not raw path, which would explode the
// label set with ids).
func (m *Metrics) Instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The access log outside has already wrapped the writer; a second wrapper would only
		// count the same status and bytes again.
		ww, ok := w.(middleware.WrapResponseWriter)
		if !ok {
			ww = middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		}
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		c := m.routeChildren(route, r.Method, status)
		c.requests.Inc()
		c.duration.Observe(time.Since(start).Seconds())
	})
}

// TxRetried implements repo.Observer.
func (m *Metrics) TxRetried() { m.txRetries.Inc() }

// BackfillCreated implements repo.Observer.
func (m *Metrics) BackfillCreated(state string) { m.backfillsCreated.WithLabelValues(state).Inc() }

// BackfillFinalized implements repo.Observer.
func (m *Metrics) BackfillFinalized(state string) { m.backfillsFinalized.WithLabelValues(state).Inc() }

// RunsClaimed implements repo.Observer.
func (m *Metrics) RunsClaimed(n int) { m.runsClaimed.Add(float64(n)) }

// LeasesExpired implements repo.Observer.
func (m *Metrics) LeasesExpired(n int) { m.leasesExpired.Add(float64(n)) }

// RunDeferred implements repo.Observer.
func (m *Metrics) RunDeferred(dagID string) { m.runsDeferred.WithLabelValues(dagID).Inc() }

// SweepPassed records one sweep pass.
func (m *Metrics) SweepPassed(d time.Duration, err error) {
	m.sweepDuration.Observe(d.Seconds())
	if err != nil {
		m.sweepErrors.Inc()
	}
}

// WebhookAttempted implements webhooks.Observer.
func (m *Metrics) WebhookAttempted(outcome string) { m.webhookAttempts.WithLabelValues(outcome).Inc() }

// WebhookDelivered implements webhooks.Observer.
func (m *Metrics) WebhookDelivered(lag time.Duration) { m.webhookLag.Observe(lag.Seconds()) }

// EventRead implements events.Observer: the listener read one event from the outbox for its
// streams, lag after its transaction.
func (m *Metrics) EventRead(lag time.Duration) {
	m.eventLag.Observe(max(lag, 0).Seconds())
}

// EventsWritten implements repo.Observer: this replica's webhook fan-out took n events of
// the type (each event is taken once, by one replica).
func (m *Metrics) EventsWritten(eventType string, n int) {
	m.eventsWritten.WithLabelValues(eventType).Add(float64(n))
}

// StreamsOpen implements events.Observer.
func (m *Metrics) StreamsOpen(n int) { m.eventStreams.Set(float64(n)) }

// StreamRejected implements events.Observer.
func (m *Metrics) StreamRejected() { m.streamsRejected.Inc() }

// OutcomeUnknown counts a change answered 503 outcome_unknown.
func (m *Metrics) OutcomeUnknown() { m.outcomeUnknown.Inc() }

// Admitted implements handlers.AdmissionObserver.
func (m *Metrics) Admitted(class string, waited time.Duration) {
	c := m.classChildren(class)
	c.admitted.Inc()
	c.wait.Observe(waited.Seconds())
}

// Shed implements handlers.AdmissionObserver.
func (m *Metrics) Shed(class string, waited time.Duration) {
	c := m.classChildren(class)
	c.shed.Inc()
	c.shedWait.Observe(waited.Seconds())
}

// Waiting implements handlers.AdmissionObserver.
func (m *Metrics) Waiting(class string, delta int) {
	m.classChildren(class).waiting.Add(float64(delta))
}

// InFlight implements handlers.AdmissionObserver.
func (m *Metrics) InFlight(class string, delta int) {
	m.classChildren(class).inFlight.Add(float64(delta))
}

package handlers_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/metrics"
)

// BenchmarkGetBackfillPath is the status read's cost in this package, without the database
// (a fake store): admission, request id, access log, spec validation, routing, encoding.
// Compared with BenchmarkHealthzPath it shows what the request path adds to a read, the
// first thing to look at when P2 (docs/BENCHMARKS.md) moves:
//
//	go test -run '^$' -bench Path -cpuprofile cpu.out ./handlers/
func BenchmarkGetBackfillPath(b *testing.B) {
	h, err := handlers.New(handlers.Options{Store: &fakeStore{}, Admission: &handlers.Admission{MaxInFlight: 18, Wait: 100 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/backfills/1", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// BenchmarkHealthzPath is the same for GET /healthz, the floor of any request.
func BenchmarkHealthzPath(b *testing.B) {
	h, err := handlers.New(handlers.Options{Store: &fakeStore{}})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// productionPath is the handler as cmd/api wires it, less the database: the JSON access log
// (written to nowhere), the request metrics, admission. Its benchmarks are the service's own
// CPU per request of P2 (the status read) and of P4 (a worker's claim and report), without
// the database driver, which no change to this package moves.
func productionPath(b *testing.B) http.Handler {
	m := metrics.New()
	h, err := handlers.New(handlers.Options{
		Store:      &fakeStore{},
		Logger:     slog.New(slog.NewJSONHandler(io.Discard, nil)).With("component", "http"),
		Metrics:    m.Handler(),
		Instrument: m.Instrument,
		Admission:  &handlers.Admission{MaxInFlight: 18, Wait: 100 * time.Millisecond, Observer: m},
	})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// go test -run '^$' -bench ProductionPath -benchmem ./handlers/
func BenchmarkProductionPathGetBackfill(b *testing.B) {
	h := productionPath(b)
	req := httptest.NewRequest(http.MethodGet, "/api/v1/backfills/1", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

func BenchmarkProductionPathClaimAndReport(b *testing.B) {
	h := productionPath(b)
	claim, report := []byte(`{"worker_id":"w1","limit":1}`), []byte(`{"state":"success","worker_id":"w1"}`)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/runs/claim", bytes.NewReader(claim))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), r)
		r = httptest.NewRequest(http.MethodPatch, "/api/v1/dags/d/runs/manual__2024-01-01T00:00:00Z", bytes.NewReader(report))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
}

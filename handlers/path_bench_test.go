package handlers_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
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

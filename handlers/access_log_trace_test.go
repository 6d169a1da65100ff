package handlers_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/tracing"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// requestLine serves one GET /healthz and returns its access log line.
func requestLine(t *testing.T, tracer *tracing.Tracer) map[string]any {
	t.Helper()
	var logs bytes.Buffer
	h, err := handlers.New(handlers.Options{
		Store:  &fakeStore{},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Tracer: tracer,
	})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line), logs.String())
	require.Equal(t, "request", line["msg"])
	return line
}

func TestAccessLogCarriesTheTraceIDOnlyWhileTracing(t *testing.T) {
	require.NotContains(t, requestLine(t, nil), "trace_id")
	on := tracing.NewWithExporter(tracetest.NewInMemoryExporter(), tracing.Config{})
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", requestLine(t, on)["trace_id"])
}

package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/backfillsvc/backfill/tracing"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestNilTracerIsOffAndAddsNoHandler(t *testing.T) {
	var tr *tracing.Tracer
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := tr.Middleware(next)
	require.Equal(t, reflect.ValueOf(next).Pointer(), reflect.ValueOf(h).Pointer(), "no wrapper")
	ctx, span := tr.Start(context.Background(), "x")
	require.False(t, span.IsRecording())
	tr.End(span, nil)
	require.Empty(t, tr.RunSpan(ctx, 1, "d", "r"))
	require.NoError(t, tr.Shutdown(ctx))
	require.Equal(t, 0.0, testing.AllocsPerRun(100, func() { tr.Start(ctx, "x") }))
}

func TestParseSamplerTakesTheSpecificationsNames(t *testing.T) {
	for _, name := range []string{"", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"} {
		_, err := tracing.ParseSampler(name, "0.01")
		require.NoError(t, err, name)
	}
	s, err := tracing.ParseSampler("parentbased_traceidratio", "0.01")
	require.NoError(t, err)
	require.Contains(t, s.Description(), "0.01")
	_, err = tracing.ParseSampler("sometimes", "")
	require.Error(t, err)
	_, err = tracing.ParseSampler("traceidratio", "2")
	require.Error(t, err)
}

func TestTraceparentRoundTrips(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWithExporter(exp, tracing.Config{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := tracing.WithTraceparent(context.Background(), tp)
	require.Equal(t, tp, tracing.Traceparent(ctx))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", tracing.TraceID(ctx))
	got := tr.RunSpan(ctx, 7, "sales", "backfill__2024")
	require.Regexp(t, `^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$`, got)
	require.Equal(t, "run sales", exp.GetSpans()[0].Name)
	require.Equal(t, context.Background(), tracing.WithTraceparent(context.Background(), ""))
}

func TestMiddlewareNamesTheSpanByRouteAndHonoursTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWithExporter(exp, tracing.Config{})
	var seen string
	h := tr.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = tracing.TraceID(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	req := httptest.NewRequest(http.MethodGet, "/x/1", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", seen)
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, "GET unmatched", spans[0].Name, "no chi route: never the raw path")
}

func TestSQLOperationIsTheFirstKeyword(t *testing.T) {
	for query, want := range map[string]string{
		"SELECT 1":                       "SELECT",
		"  \n\twith x AS (SELECT 1) ...": "WITH",
		"-- why\nUPDATE dag_runs SET":    "UPDATE",
		"/* a */ /* b */insert into t":   "INSERT",
		"(SELECT 1) UNION (SELECT 2)":    "SELECT",
		"COMMIT":                         "COMMIT",
		"":                               "SQL",
		"   ":                            "SQL",
		"/* never closed":                "SQL",
		"$1":                             "SQL",
	} {
		require.Equal(t, want, tracing.SQLOperation(query), "%q", query)
	}
}

func TestStatementSpansCostNothingWithoutARecordingParent(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		tracing.EndStatement(tracing.Statement(ctx, nil, "SELECT 1"), nil)
	})
	require.Zero(t, allocs)
}

// A request whose trace was not sampled makes no operation spans and no server-span
// attributes; one that was makes both.
func TestUnsampledRequestsMakeNoChildSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWithExporter(exp, tracing.Config{})
	h := tr.Middleware(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, end := tr.StartOperation(r.Context(), "github.com/backfillsvc/backfill/tracing_test", "test")
		end(nil)
	}))
	for _, flags := range []string{"00", "01"} {
		exp.Reset()
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-"+flags)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if flags == "00" {
			require.Empty(t, exp.GetSpans(), "the caller did not sample the trace")
			continue
		}
		require.Len(t, exp.GetSpans(), 2, "the server span and the operation's")
	}
}

package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/tracing"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A caller's traceparent is honoured, every request is a server span named by its route
// with the request id, each transaction a span named by its repository method under it, and
// a claimed run's traceparent makes its report a child of the run's span, in the claim's trace.
func TestTraceFollowsACreateAClaimAndItsReport(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	e := newEnv(t, withTracer(tracing.NewWithExporter(exp, tracing.Config{})))

	res := e.Do(http.MethodPut, "/api/v1/dags/traced", map[string]any{"schedule": "@daily", "timezone": "UTC"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res = e.Do(http.MethodPost, "/api/v1/backfills", map[string]any{
		"dag_id": "traced", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-02T00:00:00Z",
	}, "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "X-Request-Id", "create-1")
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))

	res = e.Do(http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": "w1", "limit": 1})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var claim api.ClaimResponse
	res.Decode(t, &claim)
	require.Len(t, claim.Runs, 1)
	run := claim.Runs[0]
	require.NotNil(t, run.Traceparent)

	res = e.Do(http.MethodPatch, "/api/v1/dags/traced/runs/"+run.RunId,
		map[string]any{"state": "success", "worker_id": "w1"}, "traceparent", *run.Traceparent)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))

	spans := exp.GetSpans().Snapshots()
	create := findSpan(t, spans, "POST /api/v1/backfills")
	require.Equal(t, trace.SpanKindServer, create.SpanKind())
	require.Equal(t, callerTrace, create.SpanContext().TraceID().String(), "the caller's trace")
	require.Equal(t, callerSpan, create.Parent().SpanID().String())
	require.Contains(t, create.Attributes(), attr("request_id", "create-1"))
	// The create's transaction (its reads before it are operations of their own, under the
	// same name) has its statements as its children, each named by its operation, COMMIT too.
	var createTx sdktrace.ReadOnlySpan
	for _, op := range childrenOf(spans, create) {
		if op.Name() == "repo.BackfillCreate" && slices.Contains(names(childrenOf(spans, op)), "COMMIT") {
			createTx = op
		}
	}
	require.NotNil(t, createTx, "the create's transaction, among %v", names(childrenOf(spans, create)))
	stmts := names(childrenOf(spans, createTx))
	require.Contains(t, stmts, "INSERT", "the backfill's insert")
	require.Contains(t, stmts, "COMMIT")
	for _, st := range childrenOf(spans, createTx) {
		require.Equal(t, trace.SpanKindClient, st.SpanKind(), st.Name())
		require.Contains(t, st.Attributes(), attr("db.system.name", "postgresql"), st.Name())
		require.Contains(t, st.Attributes(), attr("db.operation.name", st.Name()))
	}

	claimSpan := findSpan(t, spans, "POST /api/v1/runs/claim")
	claimTx := requireChild(t, spans, claimSpan, "repo.RunClaim")
	require.NotEmpty(t, childrenOf(spans, claimTx), "the claim's statements")
	runSpan := requireChild(t, spans, claimSpan, "run traced")
	require.Equal(t, *run.Traceparent, "00-"+runSpan.SpanContext().TraceID().String()+"-"+runSpan.SpanContext().SpanID().String()+"-01")

	report := findSpan(t, spans, "PATCH /api/v1/dags/{dag_id}/runs/{run_id}")
	require.Equal(t, runSpan.SpanContext().SpanID(), report.Parent().SpanID(), "the report is the run's child")
	require.Equal(t, claimSpan.SpanContext().TraceID(), report.SpanContext().TraceID())
	reportTx := childrenOf(spans, report)
	require.NotEmpty(t, reportTx)
	require.True(t, strings.HasPrefix(reportTx[0].Name(), "repo.Run"), reportTx[0].Name())
	for _, s := range spans {
		// Spans are named by operation, never by SQL text.
		require.NotContains(t, s.Name(), " FROM ", s.Name())
		if s.SpanKind() == trace.SpanKindClient {
			require.Regexp(t, `^[A-Z]+$`, s.Name(), "a statement span is named by its keyword")
		}
	}
}

func TestSweepPassIsASpanOverItsTransactions(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	e := newEnv(t, withTracer(tracing.NewWithExporter(exp, tracing.Config{})))
	require.NoError(t, e.Sweep.RunOnce(t.Context()))
	spans := exp.GetSpans().Snapshots()
	sweep := findSpan(t, spans, "sweep")
	require.Contains(t, names(childrenOf(spans, sweep)), "repo.SweepExpireLeases")
}

func findSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	require.Failf(t, "no span", "%q among %v", name, names(spans))
	return nil
}

func childrenOf(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func requireChild(t *testing.T, spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	kids := childrenOf(spans, parent)
	for _, s := range kids {
		if s.Name() == name {
			return s
		}
	}
	require.Failf(t, "no child", "%q under %q, whose children are %v", name, parent.Name(), names(kids))
	return nil
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

func attr(k, v string) attribute.KeyValue { return attribute.String(k, v) }

// backfillctl executor gives the program the claimed run's traceparent as TRACEPARENT and
// sends it back on the report, whose server span is then the run span's child.
func TestExecutorPassesTraceparentToItsProgramAndBackOnItsReport(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	exp := tracetest.NewInMemoryExporter()
	e := newEnv(t, withTracer(tracing.NewWithExporter(exp, tracing.Config{})))
	e.DailyBackfill("exec_traced", day(1, 1), day(1, 2))
	out := filepath.Join(t.TempDir(), "traceparent")
	r := runCLI(t, bin, e, "executor", "--until-idle", "--", "sh", "-c", `printf %s "$TRACEPARENT" > "$1"`, "sh", out)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)

	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NotEmpty(t, got)
	// The file holds the last program's; every run's report is its run span's child.
	var runs int
	var found bool
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() != "run exec_traced" {
			continue
		}
		runs++
		sc := s.SpanContext()
		found = found || "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" == string(got)
		report := requireChild(t, exp.GetSpans().Snapshots(), s, "PATCH /api/v1/dags/{dag_id}/runs/{run_id}")
		require.Equal(t, trace.SpanKindServer, report.SpanKind())
	}
	require.Positive(t, runs)
	require.True(t, found, "TRACEPARENT %q is no run span's", got)
}

package handlers_test

import (
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/handlers"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// operationClasses is the admission class of every operation of api/openapi.yaml, by
// operationId. It must name each operation: a new one fails TestEveryOperationHasItsClass
// until someone decides its class here (and, for a lease-type operation, in ClassifyRequest),
// so that nothing that keeps a lease alive can silently fall into the default class.
var operationClasses = map[string]handlers.AdmissionClass{
	// Keeping or ending a lease: shed last, on slots and a pool of their own.
	"heartbeatRun": handlers.ClassLease,
	"patchDagRun":  handlers.ClassLease, // an executor's report
	"releaseRun":   handlers.ClassLease,

	"claimRuns": handlers.ClassClaim,

	"listDags": handlers.ClassDefault, "putDag": handlers.ClassDefault, "getDag": handlers.ClassDefault,
	"deleteDag": handlers.ClassDefault, "createDagRun": handlers.ClassDefault, "listDagRuns": handlers.ClassDefault,
	"getDagRun": handlers.ClassDefault, "createBackfill": handlers.ClassDefault, "listBackfills": handlers.ClassDefault,
	"dryRunBackfill": handlers.ClassDefault, "getBackfill": handlers.ClassDefault, "patchBackfill": handlers.ClassDefault,
	"retryBackfill": handlers.ClassDefault, "listBackfillDagRuns": handlers.ClassDefault,
	"pauseBackfill": handlers.ClassDefault, "unpauseBackfill": handlers.ClassDefault,
	"cancelBackfill": handlers.ClassDefault, "listEvents": handlers.ClassDefault,
	// As JSON it is a read; as text/event-stream a stream (checked below).
	"getBackfillEvents": handlers.ClassDefault,
	"createWebhook":     handlers.ClassDefault, "listWebhooks": handlers.ClassDefault,
	"getWebhook": handlers.ClassDefault, "deleteWebhook": handlers.ClassDefault,
	"listWebhookDeliveries": handlers.ClassDefault,
	"listPools":             handlers.ClassDefault, "putPool": handlers.ClassDefault,
	"getPool": handlers.ClassDefault, "deletePool": handlers.ClassDefault,

	// Outside /api/v1: probes, metrics, the spec, its docs and the console are never shed.
	"getRoot": handlers.ClassExempt, "getHealthz": handlers.ClassExempt, "getReadyz": handlers.ClassExempt,
	"getMetrics": handlers.ClassExempt, "getOpenAPISpec": handlers.ClassExempt, "getDocs": handlers.ClassExempt,
	"getUI": handlers.ClassExempt, "getUIAsset": handlers.ClassExempt, "getDocsSlash": handlers.ClassExempt,
	"getDocsAsset": handlers.ClassExempt,
}

// TestEveryOperationHasItsClass walks every operation of the spec, builds a request to it (each
// path parameter filled in) and checks that ClassifyRequest gives it the class decided in
// operationClasses; and that the table names no operation the spec lacks.
func TestEveryOperationHasItsClass(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	require.NoError(t, err)
	seen := map[string]bool{}
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, path := range paths {
		for method, op := range doc.Paths.Value(path).Operations() {
			require.NotEmpty(t, op.OperationID, "%s %s has no operationId", method, path)
			want, ok := operationClasses[op.OperationID]
			require.True(t, ok, "%s (%s %s) has no admission class: decide it in operationClasses", op.OperationID, method, path)
			seen[op.OperationID] = true
			r := httptest.NewRequest(method, fillPath(path), nil)
			require.Equal(t, want, handlers.ClassifyRequest(r), "%s %s (%s)", method, path, op.OperationID)
		}
	}
	for id := range operationClasses {
		require.True(t, seen[id], "operationClasses names %s, which the spec does not have", id)
	}
	stream := httptest.NewRequest("GET", "/api/v1/backfills/1/events", nil)
	stream.Header.Set("Accept", "text/event-stream")
	require.Equal(t, handlers.ClassStream, handlers.ClassifyRequest(stream))
}

// fillPath gives every {parameter} of a path template a value: a number for ids, a name that
// looks like a run id for run_id, a word otherwise.
func fillPath(template string) string {
	var b strings.Builder
	for rest := template; ; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(rest)
			return b.String()
		}
		end := strings.IndexByte(rest, '}')
		b.WriteString(rest[:open])
		switch name := rest[open+1 : end]; {
		case name == "id" || strings.HasSuffix(name, "_id") && name != "dag_id" && name != "run_id":
			b.WriteString("7")
		case name == "run_id":
			b.WriteString("manual__2024-01-01T00:00:00Z")
		default:
			b.WriteString("x")
		}
		rest = rest[end+1:]
	}
}

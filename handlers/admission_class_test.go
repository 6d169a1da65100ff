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

// classOf maps the values of x-admission-class to the classes they declare.
var classOf = map[string]handlers.AdmissionClass{
	"exempt": handlers.ClassExempt, "heartbeat": handlers.ClassHeartbeat, "lease": handlers.ClassLease,
	"claim": handlers.ClassClaim, "default": handlers.ClassDefault,
}

// executorOperations are the operations of an executor that holds or seeks a lease, pinned
// here besides their declaration in the spec: shedding one of them as default can cost a run
// its lease, so a change of their class must be a decision seen in two places.
var executorOperations = map[string]handlers.AdmissionClass{
	"heartbeatRun": handlers.ClassHeartbeat,
	"patchDagRun":  handlers.ClassLease, // an executor's report
	"releaseRun":   handlers.ClassLease,
	"claimRuns":    handlers.ClassClaim,
}

// TestEveryOperationHasItsClass walks every operation of the spec and checks that it declares
// its class (x-admission-class) explicitly, that ClassifyRequest gives a request to it (each
// path parameter filled in) that class, and that the declarations follow the rules: an
// operation whose body names a worker_id is an executor's and is lease or claim, as are only
// those; /api/v1 operations are counted, the others exempt.
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
			declared, _ := op.Extensions["x-admission-class"].(string)
			want, ok := classOf[declared]
			require.True(t, ok, "%s (%s %s) declares no admission class: add x-admission-class to it", op.OperationID, method, path)
			seen[op.OperationID] = true
			r := httptest.NewRequest(method, fillPath(path), nil)
			require.Equal(t, want, handlers.ClassifyRequest(r), "%s %s (%s)", method, path, op.OperationID)

			executor := takesWorkerID(op)
			leaseOrClaim := want == handlers.ClassHeartbeat || want == handlers.ClassLease || want == handlers.ClassClaim
			require.Equal(t, executor, leaseOrClaim, "%s (%s %s): class %s, a worker_id in its body: %v", op.OperationID, method, path, declared, executor)
			if pinned, ok := executorOperations[op.OperationID]; ok {
				require.Equal(t, pinned, want, "%s is an executor's operation", op.OperationID)
			}
			require.Equal(t, strings.HasPrefix(path, "/api/v1/"), want != handlers.ClassExempt,
				"%s (%s %s): only operations outside /api/v1 are exempt", op.OperationID, method, path)
		}
	}
	for id := range executorOperations {
		require.True(t, seen[id], "executorOperations names %s, which the spec does not have", id)
	}
	stream := httptest.NewRequest("GET", "/api/v1/backfills/1/events", nil)
	stream.Header.Set("Accept", "text/event-stream")
	require.Equal(t, handlers.ClassStream, handlers.ClassifyRequest(stream))
}

// takesWorkerID reports whether op's JSON body has a worker_id: the mark of a request an
// executor sends about its lease.
func takesWorkerID(op *openapi3.Operation) bool {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return false
	}
	media := op.RequestBody.Value.Content.Get("application/json")
	if media == nil || media.Schema == nil || media.Schema.Value == nil {
		return false
	}
	_, ok := media.Schema.Value.Properties["worker_id"]
	return ok
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

package handlers

import (
	"net/http/httptest"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// A spec in which an operation declares no class, or a class that does not exist, is
// refused: the handler is never built, so no operation is admitted under a class nobody chose.
func TestClassTableRefusesAnUndeclaredOperation(t *testing.T) {
	t.Parallel()
	for _, value := range []any{nil, "", "lease-ish", 3} {
		doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
		require.NoError(t, err)
		path := doc.Paths.Find("/api/v1/runs/{id}/heartbeat")
		require.NotNil(t, path)
		op := path.Post
		require.NotNil(t, op)
		if value == nil {
			delete(op.Extensions, classExtension)
		} else {
			op.Extensions[classExtension] = value
		}
		_, err = newClassTable(doc)
		require.ErrorContains(t, err, "heartbeatRun", "x-admission-class %v", value)
	}
}

// A literal segment wins over a parameter whatever order the spec lists them in, and a
// path with more or fewer segments than a template does not match it.
func TestClassTableMatchesLiteralsFirst(t *testing.T) {
	t.Parallel()
	classes, err := admissionClasses()
	require.NoError(t, err)
	for path, want := range map[string]AdmissionClass{
		"/api/v1/runs/claim":            ClassClaim,
		"/api/v1/runs/claim/":           ClassClaim,
		"/api/v1/runs/7/heartbeat":      ClassHeartbeat,
		"/api/v1/runs/7/heartbeat/x":    ClassDefault,
		"/api/v1/runs//heartbeat":       ClassDefault,
		"/api/v1/runs/7/heartbeat/../x": ClassDefault,
		"/":                             ClassExempt,
		"/nowhere":                      ClassExempt,
	} {
		require.Equal(t, want, classes.classify(httptest.NewRequest("POST", path, nil)), path)
	}
}

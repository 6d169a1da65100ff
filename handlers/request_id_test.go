package handlers

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/require"
)

// The generated id keeps chi's form, host/random-NNNNNN with at least six digits, is new on
// every request, and is the one the context carries for the log.
func TestRequestIDKeepsChisFormAndReachesTheContext(t *testing.T) {
	var inside string
	h := requestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside = middleware.GetReqID(r.Context())
	}))
	form := regexp.MustCompile(`^[^/]+/[A-Za-z0-9]{10}-[0-9]{6,}$`)
	seen := map[string]bool{}
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		id := rec.Header().Get("X-Request-Id")
		require.Regexp(t, form, id)
		require.Equal(t, id, inside)
		require.False(t, seen[id], "id %s repeated", id)
		seen[id] = true
	}
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.Header.Set("X-Request-Id", "client-7")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, "client-7", rec.Header().Get("X-Request-Id"))
	require.Equal(t, "client-7", inside)
}

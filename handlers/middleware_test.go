package handlers_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/require"
)

// panickingStore panics in DagGet, standing in for a bug in a handler or the repository.
type panickingStore struct{ fakeStore }

func (*panickingStore) DagGet(context.Context, string) (repo.Dag, error) { panic("boom") }

func TestPanicIsLoggedAndCountedAsA500(t *testing.T) {
	var logs bytes.Buffer
	var instrumented []int
	h, err := handlers.New(handlers.Options{
		Store:  &panickingStore{},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Instrument: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
				next.ServeHTTP(ww, r)
				instrumented = append(instrumented, ww.Status())
			})
		},
	})
	require.NoError(t, err)
	rec := serveOne(t, h, http.MethodGet, "/api/v1/dags/d", "")
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Equal(t, "internal", decodeProblem(t, rec).Code)
	require.NotContains(t, rec.Body.String(), "boom", "a 5xx never carries internal text")
	require.Equal(t, []int{http.StatusInternalServerError}, instrumented, "metrics see the 500")
	require.Contains(t, logs.String(), `"msg":"panic"`)
	require.Contains(t, logs.String(), `"msg":"request"`, "the access log has the request")
	require.Contains(t, logs.String(), `"status":500`)
}

func TestRequestIDIsReturnedAndAcceptedFromTheClient(t *testing.T) {
	h, err := handlers.New(handlers.Options{Store: &fakeStore{}})
	require.NoError(t, err)

	rec := serveOne(t, h, http.MethodGet, "/api/v1/dags/d", "")
	require.NotEmpty(t, rec.Header().Get("X-Request-Id"), "a generated id is returned")

	req := httptest.NewRequest(http.MethodGet, "/api/v1/dags/d", nil)
	req.Header.Set("X-Request-Id", "client-chosen-42")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, "client-chosen-42", rec.Header().Get("X-Request-Id"))
}

func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	h, err := handlers.New(handlers.Options{Store: &fakeStore{}, APITokens: []string{"s3cret"}})
	require.NoError(t, err)
	for _, header := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer  s3cret"} {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/dags", nil)
		req.Header.Set("Authorization", header)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, "Authorization: %q: %s", header, rec.Body)
	}
	for _, header := range []string{"", "s3cret", "Basic s3cret", "Bearer wrong", "Bearers3cret", strings.Repeat("x", 10)} {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/dags", nil)
		req.Header.Set("Authorization", header)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusUnauthorized, rec.Code, "Authorization: %q", header)
	}
}

func TestProbesAreLoggedAtDebugOnly(t *testing.T) {
	var logs bytes.Buffer
	h, err := handlers.New(handlers.Options{
		Store:  &fakeStore{},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Ready:  func(context.Context) error { return nil },
	})
	require.NoError(t, err)
	serveOne(t, h, http.MethodGet, "/healthz", "")
	serveOne(t, h, http.MethodGet, "/readyz", "")
	require.Empty(t, logs.String(), "probes are not logged at info")
	serveOne(t, h, http.MethodGet, "/api/v1/dags", "")
	require.Contains(t, logs.String(), `"path":"/api/v1/dags"`)
}

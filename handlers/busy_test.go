package handlers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// busyRequests are requests to every route that calls the store, each valid.
var busyRequests = []struct{ method, path, body string }{
	{"PUT", "/api/v1/dags/d", `{"schedule":"@daily"}`},
	{"GET", "/api/v1/dags/d", ""},
	{"GET", "/api/v1/dags", ""},
	{"POST", "/api/v1/dags/d/runs", `{"logical_date":"2024-01-01T00:00:00Z"}`},
	{"GET", "/api/v1/dags/d/runs", ""},
	{"GET", "/api/v1/dags/d/runs/manual__2024-01-01T00:00:00Z", ""},
	{"PATCH", "/api/v1/dags/d/runs/manual__2024-01-01T00:00:00Z", `{"state":"success"}`},
	{"POST", "/api/v1/backfills", `{"dag_id":"d","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z"}`},
	{"POST", "/api/v1/backfills/dry_run", `{"dag_id":"d","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z"}`},
	{"GET", "/api/v1/backfills", ""},
	{"GET", "/api/v1/backfills/1", ""},
	{"GET", "/api/v1/backfills/1/dag_runs", ""},
	{"PUT", "/api/v1/backfills/1/pause", ""},
	{"PUT", "/api/v1/backfills/1/unpause", ""},
	{"PUT", "/api/v1/backfills/1/cancel", ""},
	{"POST", "/api/v1/runs/claim", `{"worker_id":"w"}`},
	{"POST", "/api/v1/runs/1/heartbeat", `{"worker_id":"w"}`},
}

func serveOne(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

type problemBody struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func decodeProblem(t *testing.T, rec *httptest.ResponseRecorder) problemBody {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), rec.Body.String())
	var p problemBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
	require.Equal(t, rec.Code, p.Status)
	return p
}

// A transaction whose serialization retries ran out, or that waited LOCK_WAIT for a held row,
// answers 503 busy with Retry-After on every route, and the answer carries no internal error
// text. A database that cannot be
// reached answers 503 unavailable, a statement timeout 503 timeout with Retry-After; any
// other failure 500 internal, also without its text.
func TestStoreFailuresAnswer5xxWithoutInternalText(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	h, err := handlers.New(handlers.Options{Store: store})
	require.NoError(t, err)

	secret := "SECRET-DETAIL could not serialize access due to read/write dependencies among transactions"
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"retries exhausted", fmt.Errorf("%w after 12 attempts: %w", repo.ErrRetriesExhausted,
			fmt.Errorf("insert runs: %w", &pq.Error{Code: "40001", Message: secret})), 503, "busy"},
		{"lock wait exceeded", fmt.Errorf("%w: %w", repo.ErrLockWait,
			fmt.Errorf("report run: %w", &pq.Error{Code: "55P03", Message: secret})), 503, "busy"},
		{"connection terminated", fmt.Errorf("claim: %w", &pq.Error{Code: "57P01", Message: secret}), 503, "unavailable"},
		{"connection failure", fmt.Errorf("begin: %w", &pq.Error{Code: "08006", Message: secret}), 503, "unavailable"},
		{"too many connections", fmt.Errorf("begin: %w", &pq.Error{Code: "53300", Message: secret}), 503, "unavailable"},
		{"network error", fmt.Errorf("begin: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New(secret)}), 503, "unavailable"},
		{"statement timeout", fmt.Errorf("insert: %w", &pq.Error{Code: "57014", Message: secret}), 503, "timeout"},
		{"connection lost during commit", fmt.Errorf("commit: %w: %w", repo.ErrOutcomeUnknown, io.EOF), 503, "outcome_unknown"},
		{"unknown failure", fmt.Errorf("insert: %w", &pq.Error{Code: "XX000", Message: secret}), 500, "internal"},
		{"plain error", errors.New(secret), 500, "internal"},
	}
	for _, c := range cases {
		for _, r := range busyRequests {
			store.reset(c.err)
			rec := serveOne(t, h, r.method, r.path, r.body)
			require.Equal(t, c.status, rec.Code, "%s: %s %s: %s", c.name, r.method, r.path, rec.Body.String())
			p := decodeProblem(t, rec)
			require.Equal(t, c.code, p.Code, "%s: %s %s", c.name, r.method, r.path)
			require.NotContains(t, rec.Body.String(), "SECRET", "%s: a 5xx carries internal error text", c.name)
			require.NotContains(t, rec.Body.String(), "serialize")
			if c.name == "lock wait exceeded" {
				require.Equal(t, "waited LOCK_WAIT for a row another request holds; nothing was written", p.Detail)
			}
			if c.code == "busy" || c.code == "timeout" || c.code == "outcome_unknown" {
				ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
				require.NoError(t, err, "%s %s: Retry-After %q", r.method, r.path, rec.Header().Get("Retry-After"))
				require.Positive(t, ra)
			}
			calls, _, _ := store.snapshot()
			require.Len(t, calls, 1, "%s %s", r.method, r.path)
		}
	}
}

// countingReader counts the bytes a handler pulls from a body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Bodies over 1 MiB are 413 payload_too_large before anything reaches the store, whether the
// size is announced (Content-Length) or not (chunked); an unannounced body is not read much
// past the limit; exactly 1 MiB is read and judged on its content.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	h, err := handlers.New(handlers.Options{Store: store})
	require.NoError(t, err)

	body := func(n int) []byte {
		prefix := `{"dag_id":"d","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z","description":"`
		return []byte(prefix + strings.Repeat("x", n-len(prefix)-2) + `"}`)
	}
	for _, route := range []struct{ method, path string }{
		{"POST", "/api/v1/backfills"}, {"POST", "/api/v1/backfills/dry_run"}, {"PUT", "/api/v1/dags/d"},
		{"POST", "/api/v1/dags/d/runs"}, {"PATCH", "/api/v1/dags/d/runs/r"}, {"POST", "/api/v1/runs/claim"},
		{"POST", "/api/v1/runs/1/heartbeat"}, {"PUT", "/api/v1/backfills/1/pause"},
	} {
		for _, chunked := range []bool{false, true} {
			for _, size := range []int{handlers.MaxBodyBytes + 1, 10 * handlers.MaxBodyBytes} {
				store.reset(nil)
				cr := &countingReader{r: bytes.NewReader(body(size))}
				req := httptest.NewRequest(route.method, route.path, cr)
				req.Header.Set("Content-Type", "application/json")
				if chunked {
					req.ContentLength = -1
				} else {
					req.ContentLength = int64(size)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				name := fmt.Sprintf("%s %s, %d bytes, chunked %v", route.method, route.path, size, chunked)
				require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, name)
				require.Equal(t, "payload_too_large", decodeProblem(t, rec).Code, name)
				calls, _, _ := store.snapshot()
				require.Empty(t, calls, name)
				require.LessOrEqual(t, cr.n, int64(handlers.MaxBodyBytes+64<<10), "%s: read %d bytes", name, cr.n)
			}
		}
	}
	// A body sent with a GET is not read at all: the route takes none.
	store.reset(nil)
	cr := &countingReader{r: bytes.NewReader(body(10 * handlers.MaxBodyBytes))}
	req := httptest.NewRequest("GET", "/api/v1/backfills", cr)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Zero(t, cr.n, "a GET's body is never read")

	// Exactly the limit: read, and refused for its content (description over 10,000
	// characters), not for its size.
	store.reset(nil)
	req = httptest.NewRequest("POST", "/api/v1/backfills", bytes.NewReader(body(handlers.MaxBodyBytes)))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
}

// The fuzz seeds are not vacuous: the valid ones reach the store and succeed, the others are
// refused before it.
func TestFuzzSeedsReachTheStore(t *testing.T) {
	store, hs := fuzzHandlers()
	written, refused := 0, 0
	for _, s := range fuzzSeeds() {
		checkOneRequest(t, s.method, s.path, s.contentType, s.key, s.auth, []byte(s.body), s.mode)
		_, writes, _ := store.snapshot()
		written += len(writes)
		req := httptest.NewRequest(s.method, s.path, strings.NewReader(s.body))
		if s.contentType != "" {
			req.Header.Set("Content-Type", s.contentType)
		}
		store.reset(nil)
		rec := httptest.NewRecorder()
		hs[0].ServeHTTP(rec, req)
		if rec.Code >= 400 {
			refused++
		}
	}
	require.GreaterOrEqual(t, written, 8, "valid seeds that wrote")
	require.GreaterOrEqual(t, refused, 15, "invalid seeds refused")
}

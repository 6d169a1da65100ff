package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serve starts a fake service and a Client for it.
func serve(t *testing.T, h http.Handler, token string) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, token)
	require.NoError(t, err)
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(int(p.Status))
	_ = json.NewEncoder(w).Encode(p)
}

func TestCreateBackfillMapsProblemJSONToProblemError(t *testing.T) {
	t.Parallel()
	active := int64(42)
	var gotKey, gotAuth string
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("Idempotency-Key")
		gotAuth = r.Header.Get("Authorization")
		writeProblem(w, Problem{Type: "about:blank", Title: "Conflict", Status: 409,
			Detail: "the DAG already has an active backfill", Code: ProblemCodeBackfillAlreadyRunning,
			ActiveBackfillId: &active})
	}), "s3cret")

	_, err := c.CreateBackfill(context.Background(), BackfillCreate{DagId: "sales"}, CreateOptions{IdempotencyKey: "k-1"})
	var p *ProblemError
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusConflict, p.Status)
	require.Equal(t, ProblemCodeBackfillAlreadyRunning, p.Code)
	require.Equal(t, int64(42), *p.ActiveBackfillID)
	require.True(t, IsCode(err, ProblemCodeBackfillAlreadyRunning))
	require.Contains(t, err.Error(), "backfill_already_running (409)")
	require.Contains(t, err.Error(), "active backfill 42")
	require.Equal(t, "k-1", gotKey)
	require.Equal(t, "Bearer s3cret", gotAuth)
}

func TestProblemErrorCarriesFieldErrors(t *testing.T) {
	t.Parallel()
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Type: "about:blank", Title: "Bad Request", Status: 400, Detail: "invalid",
			Code: ProblemCodeInvalidRequest, Errors: &[]FieldError{{Field: "limit", Message: "must be at most 1000"}}})
	}), "")
	_, err := c.ListDags(context.Background(), nil)
	var p *ProblemError
	require.ErrorAs(t, err, &p)
	require.Equal(t, []FieldError{{Field: "limit", Message: "must be at most 1000"}}, p.Errors)
	require.Contains(t, err.Error(), "limit: must be at most 1000")
}

func TestAnswerThatIsNotProblemJSONStillBecomesProblemError(t *testing.T) {
	t.Parallel()
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<h1>bad gateway</h1>"))
	}), "")
	_, err := c.GetBackfill(context.Background(), 1)
	var p *ProblemError
	require.ErrorAs(t, err, &p)
	require.Equal(t, http.StatusBadGateway, p.Status)
	require.Empty(t, p.Code)
	require.Equal(t, "<h1>bad gateway</h1>", p.Detail)
	require.True(t, p.Temporary())
}

func TestPutDagTellsCreatedFromReplaced(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusOK
		if calls.Add(1) == 1 {
			status = http.StatusCreated
		}
		writeJSON(w, status, Dag{DagId: "sales", Schedule: "@daily", Timezone: "UTC"})
	}), "")
	_, created, err := c.PutDag(context.Background(), "sales", DagPut{Schedule: "@daily"})
	require.NoError(t, err)
	require.True(t, created)
	_, created, err = c.PutDag(context.Background(), "sales", DagPut{Schedule: "@daily"})
	require.NoError(t, err)
	require.False(t, created)
}

func TestWaitBackfillWaitsOutBusyAndStopsAtTerminalState(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			writeJSON(w, http.StatusOK, Backfill{Id: 7, State: BackfillStateRunning, Progress: BackfillProgress{Total: 2, Queued: 2}})
		case 2:
			w.Header().Set("Retry-After", "0")
			writeProblem(w, Problem{Type: "about:blank", Title: "Service Unavailable", Status: 503, Detail: "busy", Code: ProblemCodeBusy})
		default:
			writeJSON(w, http.StatusOK, Backfill{Id: 7, State: BackfillStateFailed, Progress: BackfillProgress{Total: 2, Success: 1, Failed: 1}})
		}
	}), "")
	var seen []BackfillState
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := c.WaitBackfill(ctx, 7, time.Millisecond, func(b Backfill) { seen = append(seen, b.State) })
	require.NoError(t, err)
	require.Equal(t, BackfillStateFailed, b.State)
	require.Equal(t, []BackfillState{BackfillStateRunning, BackfillStateFailed}, seen)
	require.EqualValues(t, 2, b.Progress.Done())
}

func TestWaitBackfillReturnsOtherErrorsAndContextEnd(t *testing.T) {
	t.Parallel()
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Type: "about:blank", Title: "Not Found", Status: 404, Detail: "no backfill", Code: ProblemCodeBackfillNotFound})
	}), "")
	_, err := c.WaitBackfill(context.Background(), 1, time.Millisecond, nil)
	require.True(t, IsCode(err, ProblemCodeBackfillNotFound))

	running := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Backfill{Id: 1, State: BackfillStateRunning})
	}), "")
	// The context ends once a poll has been seen, not after a fixed time: on a loaded machine
	// the first answer can take longer than any short deadline.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := running.WaitBackfill(ctx, 1, 5*time.Millisecond, func(Backfill) { cancel() })
	require.True(t, errors.Is(err, context.Canceled), "err: %v", err)
	require.Equal(t, BackfillStateRunning, b.State)
}

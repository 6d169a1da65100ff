package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordRequest answers every request with status and v, and keeps the last one's headers
// and body.
func recordRequest(t *testing.T, status int, v any) (*Client, *http.Header, *string) {
	t.Helper()
	var header http.Header
	var body string
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		header, body = r.Header.Clone(), string(b)
		writeJSON(w, status, v)
	}), "")
	return c, &header, &body
}

// A patch sends exactly the fields that are set: a value, or null for a cleared one; the
// zero field is left out, so the service keeps it.
func TestPatchBackfillSendsSetFieldsAndNulls(t *testing.T) {
	t.Parallel()
	c, header, body := recordRequest(t, http.StatusOK, Backfill{Id: 7})
	_, err := c.PatchBackfill(context.Background(), 7, BackfillChanges{
		MaxActiveRuns: Set[int32](3), MaxFailedRuns: Null[int32](), Description: Set(""),
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"max_active_runs":3,"max_failed_runs":null,"description":""}`, *body)
	require.Equal(t, "application/merge-patch+json", header.Get("Content-Type"))

	_, err = c.PatchBackfill(context.Background(), 7, BackfillChanges{Pool: Null[string]()})
	require.NoError(t, err)
	require.JSONEq(t, `{"pool":null}`, *body)
}

// A retry sends its overrides with the key and the plan hash as a quoted If-Match; a conf
// keeps its bytes as given.
func TestRetryBackfillSendsOverridesKeyAndPlan(t *testing.T) {
	t.Parallel()
	c, header, body := recordRequest(t, http.StatusCreated, Backfill{Id: 8})
	b, err := c.RetryBackfill(context.Background(), 7, RetryRequest{
		MaxFailedRuns: Set[int32](2), DagRunConf: Set(Conf(`{"n":9007199254740993}`)),
	}, RetryOptions{IdempotencyKey: "k-retry", IfPlan: "abc"})
	require.NoError(t, err)
	require.EqualValues(t, 8, b.Id)
	require.JSONEq(t, `{"max_failed_runs":2,"dag_run_conf":{"n":9007199254740993}}`, *body)
	require.Contains(t, *body, "9007199254740993")
	require.Equal(t, "k-retry", header.Get("Idempotency-Key"))
	require.Equal(t, `"abc"`, header.Get("If-Match"))

	_, err = c.RetryBackfill(context.Background(), 7, RetryRequest{}, RetryOptions{})
	require.NoError(t, err)
	require.Equal(t, "{}", *body)
	require.NotEmpty(t, header.Get("Idempotency-Key"), "no key given: a random one is sent")
	require.Empty(t, header.Get("If-Match"))
}

func TestCreateBackfillIfPlanSendsQuotedIfMatch(t *testing.T) {
	t.Parallel()
	c, header, body := recordRequest(t, http.StatusCreated, Backfill{Id: 9})
	_, err := c.CreateBackfill(context.Background(), BackfillCreate{DagId: "sales"}, CreateOptions{IfPlan: "h1"})
	require.NoError(t, err)
	require.Equal(t, `"h1"`, header.Get("If-Match"))
	var req BackfillCreate
	require.NoError(t, json.Unmarshal([]byte(*body), &req))
	require.Equal(t, "sales", req.DagId)
}

func TestReportRunSendsWorkerAndNoteOnlyWhenGiven(t *testing.T) {
	t.Parallel()
	c, _, body := recordRequest(t, http.StatusOK, DagRun{})
	_, err := c.ReportRun(context.Background(), "d", "r", RunReport{State: DagRunStateFailed})
	require.NoError(t, err)
	require.JSONEq(t, `{"state":"failed"}`, *body)
	_, err = c.ReportRun(context.Background(), "d", "r", RunReport{State: DagRunStateFailed, WorkerID: "w", Note: "why"})
	require.NoError(t, err)
	require.JSONEq(t, `{"state":"failed","worker_id":"w","note":"why"}`, *body)
}

package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// day is a UTC midnight in 2024, the year most fixtures use.
func day(month time.Month, d int) time.Time { return time.Date(2024, month, d, 0, 0, 0, 0, time.UTC) }

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// PutDag creates or replaces a DAG and returns it.
func (e *env) PutDag(dagID, schedule, timezone string) api.Dag {
	e.t.Helper()
	body := map[string]any{"schedule": schedule}
	if timezone != "" {
		body["timezone"] = timezone
	}
	res := e.Do(http.MethodPut, "/api/v1/dags/"+dagID, body)
	require.Contains(e.t, []int{http.StatusOK, http.StatusCreated}, res.Status, "body: %s", res.Body)
	var d api.Dag
	res.Decode(e.t, &d)
	return d
}

// backfillBody is a creation request; extra fields override the defaults.
func backfillBody(dagID string, from, to time.Time, extra ...any) map[string]any {
	body := map[string]any{"dag_id": dagID, "from_date": ts(from), "to_date": ts(to)}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return body
}

// CreateBackfill POSTs a backfill that must be created (201) and returns it.
func (e *env) CreateBackfill(body map[string]any) api.Backfill {
	e.t.Helper()
	res := e.Do(http.MethodPost, "/api/v1/backfills", body)
	require.Equal(e.t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var b api.Backfill
	res.Decode(e.t, &b)
	return b
}

// GetBackfill reads a backfill.
func (e *env) GetBackfill(id int64) api.Backfill {
	e.t.Helper()
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d", id), nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var b api.Backfill
	res.Decode(e.t, &b)
	return b
}

// Slots reads every slot of a backfill in sort order.
func (e *env) Slots(id int64) []api.BackfillDagRun {
	e.t.Helper()
	var all []api.BackfillDagRun
	for offset := 0; ; offset += 1000 {
		res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/dag_runs?limit=1000&offset=%d", id, offset), nil)
		require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
		var page api.BackfillDagRunCollection
		res.Decode(e.t, &page)
		all = append(all, page.BackfillDagRuns...)
		if len(page.BackfillDagRuns) < 1000 {
			require.EqualValues(e.t, page.TotalEntries, len(all))
			return all
		}
	}
}

// Claim claims up to limit runs for a worker.
func (e *env) Claim(workerID string, limit int) []api.DagRun {
	e.t.Helper()
	res := e.Do(http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": workerID, "limit": limit})
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var c api.ClaimResponse
	res.Decode(e.t, &c)
	return c.Runs
}

// Report PATCHes a run's outcome as its worker and requires 200.
func (e *env) Report(run api.DagRun, state string) api.DagRun {
	e.t.Helper()
	res := e.Do(http.MethodPatch, "/api/v1/dags/"+run.DagId+"/runs/"+run.RunId,
		map[string]any{"state": state, "worker_id": *run.WorkerId})
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var out api.DagRun
	res.Decode(e.t, &out)
	return out
}

func TestHarnessServesHealthAndValidatesAgainstSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodGet, "/healthz", nil)
	require.Equal(t, http.StatusOK, res.Status)
	res = e.Do(http.MethodGet, "/readyz", nil)
	require.Equal(t, http.StatusOK, res.Status)
	res = e.Do(http.MethodGet, "/api/v1/nowhere", nil)
	require.Equal(t, http.StatusNotFound, res.Status)
	e.PutDag("harness", "@daily", "")
	b := e.CreateBackfill(backfillBody("harness", day(1, 1), day(1, 3)))
	require.EqualValues(t, 3, b.Progress.Total)
}

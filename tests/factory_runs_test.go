package tests

// Factories for runs: manual runs, claims, reports, heartbeats and releases.

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

const claimPath = "/api/v1/runs/claim"

// runPath is the path of one run; both ids are escaped, as a run id may hold "+" or ":".
func runPath(dagID, runID string) string {
	return "/api/v1/dags/" + url.PathEscape(dagID) + "/runs/" + url.PathEscape(runID)
}

func heartbeatPath(id int64) string { return fmt.Sprintf("/api/v1/runs/%d/heartbeat", id) }
func releasePath(id int64) string   { return fmt.Sprintf("/api/v1/runs/%d/release", id) }

// CreateManualRun triggers a manual run that must be created; conf may be nil.
func (e *env) CreateManualRun(dagID string, logical time.Time, conf map[string]any) api.DagRun {
	e.t.Helper()
	body := map[string]any{"logical_date": ts(logical)}
	if conf != nil {
		body["conf"] = conf
	}
	return call[api.DagRun](e, http.StatusCreated, http.MethodPost, "/api/v1/dags/"+url.PathEscape(dagID)+"/runs", body)
}

// SucceededManualRuns creates a manual run of the DAG for each date and marks it success.
func (e *env) SucceededManualRuns(dagID string, dates ...time.Time) {
	e.t.Helper()
	for _, d := range dates {
		r := e.CreateManualRun(dagID, d, nil)
		e.MarkRun(dagID, r.RunId, "success")
	}
}

// GetRun reads one run.
func (e *env) GetRun(dagID, runID string) api.DagRun {
	e.t.Helper()
	return call[api.DagRun](e, http.StatusOK, http.MethodGet, runPath(dagID, runID), nil)
}

// ListRuns lists a DAG's runs with a query string ("" or "?...").
func (e *env) ListRuns(dagID, query string) api.DagRunCollection {
	e.t.Helper()
	return call[api.DagRunCollection](e, http.StatusOK, http.MethodGet, "/api/v1/dags/"+url.PathEscape(dagID)+"/runs"+query, nil)
}

// Claim claims up to limit runs for a worker.
func (e *env) Claim(workerID string, limit int) []api.DagRun {
	e.t.Helper()
	return e.ClaimWith(map[string]any{"worker_id": workerID, "limit": limit})
}

// ClaimDag claims up to limit runs of one DAG.
func (e *env) ClaimDag(workerID, dagID string, limit int) []api.DagRun {
	e.t.Helper()
	return e.ClaimWith(map[string]any{"worker_id": workerID, "limit": limit, "dag_id": dagID})
}

// ClaimWith claims with an explicit body and requires 200.
func (e *env) ClaimWith(body map[string]any) []api.DagRun {
	e.t.Helper()
	return call[api.ClaimResponse](e, http.StatusOK, http.MethodPost, claimPath, body).Runs
}

// ClaimN is Claim that requires exactly n runs in the answer.
func (e *env) ClaimN(n int, workerID string, limit int) []api.DagRun {
	e.t.Helper()
	return e.ClaimWithN(n, map[string]any{"worker_id": workerID, "limit": limit})
}

// ClaimWithN is ClaimWith that requires exactly n runs in the answer.
func (e *env) ClaimWithN(n int, body map[string]any) []api.DagRun {
	e.t.Helper()
	runs := e.ClaimWith(body)
	require.Len(e.t, runs, n, "claimed with %v", body)
	return runs
}

// PatchRun PATCHes a run's state and returns the answer, whatever it is; worker may be ""
// (no worker_id: an operator's report).
func (e *env) PatchRun(dagID, runID, state, worker string) *response {
	e.t.Helper()
	body := map[string]any{"state": state}
	if worker != "" {
		body["worker_id"] = worker
	}
	return e.Do(http.MethodPatch, runPath(dagID, runID), body)
}

// Report PATCHes a run's outcome as its worker and requires 200.
func (e *env) Report(run api.DagRun, state string) api.DagRun {
	e.t.Helper()
	return call[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(run.DagId, run.RunId),
		map[string]any{"state": state, "worker_id": *run.WorkerId})
}

// ReportFailed reports a run failed as its worker, with a note, and requires 200.
func (e *env) ReportFailed(run api.DagRun, note string) api.DagRun {
	e.t.Helper()
	return call[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(run.DagId, run.RunId),
		map[string]any{"state": "failed", "worker_id": *run.WorkerId, "note": note})
}

// MarkRun reports a run's outcome as an operator (no worker_id) and requires 200.
func (e *env) MarkRun(dagID, runID, state string) api.DagRun {
	e.t.Helper()
	return call[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath(dagID, runID), map[string]any{"state": state})
}

// Heartbeat sends a worker's heartbeat and returns the answer, whatever it is.
func (e *env) Heartbeat(id int64, worker string) *response {
	e.t.Helper()
	return e.Do(http.MethodPost, heartbeatPath(id), map[string]any{"worker_id": worker})
}

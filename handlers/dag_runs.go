package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// CreateDagRun triggers a manual run.
func (s *Server) CreateDagRun(w http.ResponseWriter, r *http.Request, dagID string, params api.CreateDagRunParams) {
	var body api.DagRunCreate
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	if p := checkTimestamps(map[string]time.Time{"logical_date": body.LogicalDate}); p != nil {
		writeProblem(w, *p)
		return
	}
	p := repo.RunCreateParams{DagID: dagID, LogicalDate: body.LogicalDate, Conf: confIn(body.Conf), Pool: body.Pool}
	if params.IdempotencyKey != nil {
		p.IdempotencyKey = *params.IdempotencyKey
	}
	run, replayed, err := s.store.RunCreate(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/api/v1/dags/"+url.PathEscape(run.DagID)+"/runs/"+url.PathEscape(run.RunID))
	s.writeJSON(w, r, http.StatusCreated, runOut(run))
}

// ListDagRuns pages a DAG's runs by logical date.
func (s *Server) ListDagRuns(w http.ResponseWriter, r *http.Request, dagID string, params api.ListDagRunsParams) {
	pr, prob := s.pageOf(params.Limit, params.Offset, params.Cursor, runListing, "")
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	p := repo.RunListParams{DagID: dagID, BackfillID: params.BackfillId, ListParams: repo.ListParams{Limit: pr.repoLimit(), Offset: pr.offset, After: pr.after}}
	if params.State != nil {
		state := string(*params.State)
		p.State = &state
	}
	runs, total, err := s.store.RunList(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	runs, next := nextCursor(runs, pr, runListing, "", func(run repo.Run) string { return run.LogicalDate.UTC().Format(time.RFC3339Nano) })
	s.writeJSON(w, r, http.StatusOK, api.DagRunCollection{DagRuns: convertAll(runs, runOut), TotalEntries: int64(total), NextCursor: next})
}

// GetDagRun answers one run.
func (s *Server) GetDagRun(w http.ResponseWriter, r *http.Request, dagID, runID string) {
	run, err := s.store.RunGet(r.Context(), dagID, runID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
}

// PatchDagRun reports a run's outcome.
func (s *Server) PatchDagRun(w http.ResponseWriter, r *http.Request, dagID, runID string) {
	var body api.DagRunPatch
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	params := repo.RunReportParams{
		DagID: dagID, RunID: runID, State: domain.RunState(body.State), WorkerID: body.WorkerId, Note: body.Note,
	}
	if p := deferralProblem(body); p != nil {
		writeProblem(w, *p)
		return
	}
	if body.RetryAfterSeconds != nil {
		params.RetryAfterSeconds = int(*body.RetryAfterSeconds)
	}
	run, err := s.store.RunReport(r.Context(), params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
}

// deferralProblem is the 422 for a report whose retry_after_seconds does not go with its
// state: a deferral needs one within 1..MaxDeferSeconds, and no other state takes one. It is
// a 422 rather than a 400 because each field on its own is well-formed; the pair is not.
func deferralProblem(body api.DagRunPatch) *api.Problem {
	deferred := body.State == api.DagRunReportStateDeferred
	var detail string
	switch {
	case deferred && body.RetryAfterSeconds == nil:
		detail = "a report of deferred needs retry_after_seconds"
	case deferred && (*body.RetryAfterSeconds < 1 || *body.RetryAfterSeconds > domain.MaxDeferSeconds):
		detail = fmt.Sprintf("retry_after_seconds must be 1..%d", domain.MaxDeferSeconds)
	case !deferred && body.RetryAfterSeconds != nil:
		detail = "retry_after_seconds goes only with state deferred"
	default:
		return nil
	}
	p := problem(http.StatusUnprocessableEntity, "invalid_deferral", detail)
	return &p
}

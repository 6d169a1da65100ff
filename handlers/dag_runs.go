package handlers

import (
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
	run, err := s.store.RunReport(r.Context(), repo.RunReportParams{
		DagID: dagID, RunID: runID, State: domain.RunState(body.State), WorkerID: body.WorkerId, Note: body.Note,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
}

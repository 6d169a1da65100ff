package handlers

import (
	"net/http"

	"github.com/backfillsvc/backfill/api"
)

// ReleaseRun hands a running run back from the worker that holds it.
func (s *Server) ReleaseRun(w http.ResponseWriter, r *http.Request, id int64) {
	var body api.ReleaseRequest
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	run, err := s.store.RunRelease(r.Context(), id, body.WorkerId)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
}

// DeleteDag removes a DAG with its runs and backfill history.
func (s *Server) DeleteDag(w http.ResponseWriter, r *http.Request, dagID string) {
	if err := s.store.DagDelete(r.Context(), dagID); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

package handlers

import (
	"net/http"

	"github.com/backfillsvc/backfill/api"
)

// GetHealthz answers while the process is alive.
func (s *Server) GetHealthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, api.Health{Status: api.HealthStatusOk})
}

// GetReadyz answers 200 only while the database accepts a write within 2 s and is migrated.
func (s *Server) GetReadyz(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			s.log(r).Warn("not ready", "err", err)
			writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", "the database does not accept a write within 2 s (unreachable, read-only, or its synchronous standby is gone), or is not migrated"))
			return
		}
	}
	s.writeJSON(w, r, http.StatusOK, api.Health{Status: api.HealthStatusOk})
}

// GetMetrics serves Prometheus metrics.
func (s *Server) GetMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		writeProblem(w, problem(http.StatusNotFound, "not_found", "metrics are not enabled"))
		return
	}
	s.metrics.ServeHTTP(w, r)
}

// GetOpenAPISpec serves the contract this server is generated from.
func (s *Server) GetOpenAPISpec(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(api.SpecYAML) // the client hung up; nothing to do
}

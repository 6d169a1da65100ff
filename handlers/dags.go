package handlers

import (
	"net/http"
	"net/url"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// PutDag creates or replaces a DAG.
func (s *Server) PutDag(w http.ResponseWriter, r *http.Request, dagID string) {
	var body api.DagPut
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	params := repo.DagPutParams{
		DagID:         dagID,
		Schedule:      body.Schedule,
		Timezone:      s.defaults.dagTimezone,
		MaxActiveRuns: s.defaults.dagMaxActiveRuns,
		IsPaused:      s.defaults.dagIsPaused,
		Description:   body.Description,
	}
	if body.Timezone != nil {
		params.Timezone = *body.Timezone
	}
	if body.MaxActiveRuns != nil {
		params.MaxActiveRuns = int(*body.MaxActiveRuns)
	}
	if body.IsPaused != nil {
		params.IsPaused = *body.IsPaused
	}
	params.DependsOnPast = s.defaults.dagDependsOnPast
	if body.DependsOnPast != nil {
		params.DependsOnPast = *body.DependsOnPast
	}
	if body.Upstreams != nil {
		params.Upstreams = s.upstreamsIn(*body.Upstreams)
	}
	dag, created, err := s.store.DagPut(r.Context(), params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writePut(w, r, created, "/api/v1/dags/"+url.PathEscape(dag.DagID), dagOut(dag))
}

// GetDag answers one DAG.
func (s *Server) GetDag(w http.ResponseWriter, r *http.Request, dagID string) {
	dag, err := s.store.DagGet(r.Context(), dagID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, dagOut(dag))
}

// ListDags pages DAGs by dag_id.
func (s *Server) ListDags(w http.ResponseWriter, r *http.Request, params api.ListDagsParams) {
	pr, prob := s.pageOf(params.Limit, params.Offset, params.Cursor, dagListing, "")
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	dags, total, err := s.store.DagList(r.Context(), repo.ListParams{Limit: pr.repoLimit(), Offset: pr.offset, After: pr.after})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	dags, next := nextCursor(dags, pr, dagListing, "", func(d repo.Dag) string { return d.DagID })
	s.writeJSON(w, r, http.StatusOK, api.DagCollection{Dags: convertAll(dags, dagOut), TotalEntries: int64(total), NextCursor: next})
}

// upstreamsIn is a DAG definition's upstreams with the spec's defaults filled in.
func (s *Server) upstreamsIn(in []api.DagUpstreamPut) []domain.Upstream {
	out := make([]domain.Upstream, len(in))
	for i, u := range in {
		out[i] = domain.Upstream{DagID: u.DagId, Mapping: s.defaults.upstreamMapping, Lookback: s.defaults.upstreamLookback}
		if u.Mapping != nil {
			out[i].Mapping = domain.DependencyMapping(*u.Mapping)
		}
		if u.Lookback != nil {
			out[i].Lookback = int(*u.Lookback)
		}
	}
	return out
}

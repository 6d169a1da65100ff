package handlers

import (
	"net/http"
	"net/url"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/repo"
)

// PutPool creates a pool or replaces its settings.
func (s *Server) PutPool(w http.ResponseWriter, r *http.Request, name string) {
	var body api.PoolPut
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	params := repo.PoolPutParams{Name: name, Slots: int(body.Slots), Description: body.Description}
	if body.Rate != nil {
		params.Rate = &repo.PoolRate{Runs: int(body.Rate.Runs), Per: string(body.Rate.Per)}
	}
	pool, created, err := s.store.PoolPut(r.Context(), params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writePut(w, r, created, "/api/v1/pools/"+url.PathEscape(pool.Name), poolOut(pool))
}

// GetPool answers one pool with its running and queued runs.
func (s *Server) GetPool(w http.ResponseWriter, r *http.Request, name string) {
	pool, err := s.store.PoolGet(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, poolOut(pool))
}

// ListPools pages pools by name.
func (s *Server) ListPools(w http.ResponseWriter, r *http.Request, params api.ListPoolsParams) {
	answerOffsetPage(s, w, r, params.Limit, params.Offset, s.store.PoolList,
		func(pools []repo.Pool, total int64) api.PoolCollection {
			return api.PoolCollection{Pools: convertAll(pools, poolOut), TotalEntries: total}
		})
}

// DeletePool deletes a pool nothing unfinished names.
func (s *Server) DeletePool(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.store.PoolDelete(r.Context(), name); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func poolOut(p repo.Pool) api.Pool {
	out := api.Pool{
		Name:        p.Name,
		Slots:       int32(p.Slots),
		Description: p.Description,
		Running:     int32(p.Running),
		Queued:      int32(p.Queued),
		NextStartAt: utcPtr(p.NextStartAt),
		CreatedAt:   utc(p.CreatedAt),
		UpdatedAt:   utc(p.UpdatedAt),
	}
	if p.RateRuns != nil && p.RatePer != nil {
		out.Rate = &api.PoolRate{Runs: int32(*p.RateRuns), Per: api.PoolRatePer(*p.RatePer)}
	}
	return out
}

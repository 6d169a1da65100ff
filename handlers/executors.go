package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/repo"
)

// ClaimRuns leases queued runs to a worker.
func (s *Server) ClaimRuns(w http.ResponseWriter, r *http.Request, hp api.ClaimRunsParams) {
	var body api.ClaimRequest
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	params := repo.RunClaimParams{WorkerID: body.WorkerId, Limit: s.defaults.claimLimit, LeaseSeconds: s.defaults.leaseSeconds, DagID: body.DagId, Pool: body.Pool}
	if body.Limit != nil {
		params.Limit = *body.Limit
	}
	if body.LeaseSeconds != nil {
		params.LeaseSeconds = *body.LeaseSeconds
	}
	if hp.IdempotencyKey != nil {
		params.IdempotencyKey = *hp.IdempotencyKey
	}
	var wait time.Duration
	if body.WaitSeconds != nil {
		wait = time.Duration(*body.WaitSeconds) * time.Second
	}
	runs, replayed, err := s.claimWaiting(r, params, wait)
	if errors.Is(err, errShedWhileWaiting) {
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "busy", "the server is at capacity; retry shortly"))
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	out := convertAll(runs, runOut)
	if s.tracer != nil {
		for i := range out {
			tp := s.tracer.RunSpan(r.Context(), out[i].Id, out[i].DagId, out[i].RunId)
			out[i].Traceparent = &tp
		}
	}
	s.writeJSON(w, r, http.StatusOK, api.ClaimResponse{Runs: out})
}

// HeartbeatRun extends a lease.
func (s *Server) HeartbeatRun(w http.ResponseWriter, r *http.Request, id int64) {
	var body api.HeartbeatRequest
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	hb, err := s.store.RunHeartbeat(r.Context(), id, body.WorkerId)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, api.HeartbeatResponse{LeaseExpiresAt: utc(hb.LeaseExpiresAt), CancelRequested: hb.CancelRequested})
}

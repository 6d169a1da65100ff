package handlers

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// backfillParams reads a creation body, with the spec's defaults filled in.
func (s *Server) backfillParams(r *http.Request) (domain.BackfillRequest, *api.Problem) {
	var body api.BackfillCreate
	if p := decodeBody(r, &body); p != nil {
		return domain.BackfillRequest{}, p
	}
	stamps := map[string]time.Time{"from_date": body.FromDate, "to_date": body.ToDate}
	if body.LogicalDates != nil {
		addLogicalDates(stamps, *body.LogicalDates)
	}
	if p := checkTimestamps(stamps); p != nil {
		return domain.BackfillRequest{}, p
	}
	p := domain.BackfillRequest{
		DagID:             body.DagId,
		FromDate:          body.FromDate.UTC(),
		ToDate:            body.ToDate.UTC(),
		DagRunConf:        confIn(body.DagRunConf),
		RunBackwards:      s.defaults.backfillRunBackwards,
		ReprocessBehavior: s.defaults.reprocessBehavior,
		MaxActiveRuns:     s.defaults.backfillMaxActiveRuns,
		Description:       body.Description,
		Pool:              body.Pool,
		CodeRef:           body.CodeRef,
		Reason:            body.Reason,
	}
	if body.LogicalDates != nil {
		p.LogicalDates = *body.LogicalDates
	}
	if prob := checkCodeRef(body.CodeRef); prob != nil {
		return domain.BackfillRequest{}, prob
	}
	if body.Priority != nil {
		p.Priority = int(*body.Priority)
		if prob := checkPriority(&p.Priority); prob != nil {
			return domain.BackfillRequest{}, prob
		}
	}
	if body.RunBackwards != nil {
		p.RunBackwards = *body.RunBackwards
	}
	if body.ReprocessBehavior != nil {
		p.ReprocessBehavior = domain.ReprocessBehavior(*body.ReprocessBehavior)
	}
	if body.MaxActiveRuns != nil {
		p.MaxActiveRuns = int(*body.MaxActiveRuns)
	}
	if body.MaxFailedRuns != nil {
		n := int(*body.MaxFailedRuns)
		p.MaxFailedRuns = &n
	}
	return p, nil
}

// CreateBackfill creates a backfill with all its runs, or replays an idempotent request.
func (s *Server) CreateBackfill(w http.ResponseWriter, r *http.Request, params api.CreateBackfillParams) {
	p, prob := s.backfillParams(r)
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	if params.IdempotencyKey != nil {
		p.IdempotencyKey = *params.IdempotencyKey
	}
	if p.IfMatch, prob = parseIfMatch(params.IfMatch); prob != nil {
		writeProblem(w, *prob)
		return
	}
	if p.CreatedBy, prob = s.actor(r); prob != nil {
		writeProblem(w, *prob)
		return
	}
	b, replayed, err := s.store.BackfillCreate(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.answerCreated(w, r, b, replayed)
}

// DryRunBackfill answers what a creation would do, writing nothing.
func (s *Server) DryRunBackfill(w http.ResponseWriter, r *http.Request) {
	p, prob := s.backfillParams(r)
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	plan, err := s.store.BackfillDryRun(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.DryRunCollection{Runs: convertAll(plan.Slots, plannedOut), TotalEntries: int64(len(plan.Slots)), PlanHash: plan.PlanHash,
		Estimate: estimateOut(plan.Estimate), EstimateBasis: api.DryRunCollectionEstimateBasis(plan.EstimateBasis)}
	w.Header().Set("ETag", etag(plan.PlanHash))
	s.writeJSON(w, r, http.StatusOK, out)
}

// ListBackfills pages backfills.
func (s *Server) ListBackfills(w http.ResponseWriter, r *http.Request, params api.ListBackfillsParams) {
	order := s.defaults.backfillOrderBy
	if params.OrderBy != nil {
		order = *params.OrderBy
	}
	pr, prob := s.pageOf(params.Limit, params.Offset, params.Cursor, backfillListing, string(order))
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	p := repo.BackfillListParams{
		DagID:      params.DagId,
		Active:     params.Active,
		Descending: order == api.ListBackfillsParamsOrderByIdDesc,
		ListParams: repo.ListParams{Limit: pr.repoLimit(), Offset: pr.offset, After: pr.after},
	}
	if params.State != nil {
		state := string(*params.State)
		p.State = &state
	}
	backfills, total, err := s.store.BackfillList(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	backfills, next := nextCursor(backfills, pr, backfillListing, string(order), func(b repo.Backfill) string { return strconv.FormatInt(b.ID, 10) })
	s.writeJSON(w, r, http.StatusOK, api.BackfillCollection{Backfills: convertAll(backfills, backfillOut), TotalEntries: int64(total), NextCursor: next})
}

// GetBackfill answers one backfill with its progress.
func (s *Server) GetBackfill(w http.ResponseWriter, r *http.Request, id int64) {
	b, eta, err := s.store.BackfillGetWithETA(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, backfillWithETA{Backfill: backfillOut(b), EtaSeconds: eta})
}

// ListBackfillDagRuns pages a backfill's slots.
func (s *Server) ListBackfillDagRuns(w http.ResponseWriter, r *http.Request, id int64, params api.ListBackfillDagRunsParams) {
	order := s.defaults.slotOrderBy
	if params.OrderBy != nil {
		order = *params.OrderBy
	}
	pr, prob := s.pageOf(params.Limit, params.Offset, params.Cursor, slotListing, string(order))
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	p := repo.BackfillSlotsParams{
		BackfillID: id,
		Blocked:    params.Blocked,
		Descending: order == api.ListBackfillDagRunsParamsOrderBySortOrdinalDesc,
		ListParams: repo.ListParams{Limit: pr.repoLimit(), Offset: pr.offset, After: pr.after},
	}
	if params.State != nil {
		state := string(*params.State)
		p.State = &state
	}
	slots, total, err := s.store.BackfillSlots(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	slots, next := nextCursor(slots, pr, slotListing, string(order), func(sl repo.BackfillSlot) string { return strconv.Itoa(sl.SortOrdinal) })
	s.writeJSON(w, r, http.StatusOK, api.BackfillDagRunCollection{BackfillDagRuns: convertAll(slots, slotOut), TotalEntries: total, NextCursor: next})
}

// PauseBackfill stops handing out the backfill's runs.
func (s *Server) PauseBackfill(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerBackfill(w, r, s.store.BackfillPause, id)
}

// UnpauseBackfill resumes a paused backfill.
func (s *Server) UnpauseBackfill(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerBackfill(w, r, s.store.BackfillUnpause, id)
}

// CancelBackfill cancels the backfill's queued runs and lets running ones finish.
func (s *Server) CancelBackfill(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerBackfill(w, r, s.store.BackfillCancel, id)
}

// answerBackfill runs one backfill operation and answers the backfill it leaves.
func (s *Server) answerBackfill(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, id int64) (repo.Backfill, error), id int64) {
	b, err := op(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, backfillOut(b))
}

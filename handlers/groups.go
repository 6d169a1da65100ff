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

// groupParams reads a group's creation body, with the spec's defaults filled in (those of a
// backfill's creation: a member is an ordinary backfill).
func (s *Server) groupParams(r *http.Request) (domain.GroupRequest, *api.Problem) {
	var body api.BackfillGroupCreate
	if p := decodeBody(r, &body); p != nil {
		return domain.GroupRequest{}, p
	}
	if p := checkTimestamps(map[string]time.Time{"from_date": body.FromDate, "to_date": body.ToDate}); p != nil {
		return domain.GroupRequest{}, p
	}
	p := domain.GroupRequest{
		DagIDs:            body.DagIds,
		IncludeDownstream: domain.IncludeNone,
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
	if prob := checkCodeRef(body.CodeRef); prob != nil {
		return domain.GroupRequest{}, prob
	}
	if body.Priority != nil {
		p.Priority = int(*body.Priority)
		if prob := checkPriority(&p.Priority); prob != nil {
			return domain.GroupRequest{}, prob
		}
	}
	if body.IncludeDownstream != nil {
		p.IncludeDownstream = domain.IncludeDownstream(*body.IncludeDownstream)
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

// CreateBackfillGroup creates a group with its members, runs and dependencies, or replays an
// idempotent request.
func (s *Server) CreateBackfillGroup(w http.ResponseWriter, r *http.Request, params api.CreateBackfillGroupParams) {
	p, prob := s.groupParams(r)
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
	g, replayed, err := s.store.BackfillGroupCreate(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		s.log(r).Info("backfill group created", "group_id", g.ID, "dag_ids", []string(g.DagIDs),
			"members", len(g.Members), "dependencies", g.Dependencies,
			"created_by", valueOr(g.CreatedBy), "reason", valueOr(g.Reason))
	}
	w.Header().Set("Location", "/api/v1/backfill_groups/"+strconv.FormatInt(g.ID, 10))
	s.writeJSON(w, r, http.StatusCreated, groupOut(g))
}

// DryRunBackfillGroup answers what a group's creation would do, writing nothing.
func (s *Server) DryRunBackfillGroup(w http.ResponseWriter, r *http.Request) {
	p, prob := s.groupParams(r)
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	plan, err := s.store.BackfillGroupDryRun(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.BackfillGroupDryRun{
		Members:      convertAll(plan.Members, groupDryRunMemberOut),
		Dependencies: int64(plan.Dependencies),
		Blocked:      int64(plan.Blocked),
		PlanHash:     plan.PlanHash,
	}
	w.Header().Set("ETag", etag(plan.PlanHash))
	s.writeJSON(w, r, http.StatusOK, out)
}

// ListBackfillGroups pages groups.
func (s *Server) ListBackfillGroups(w http.ResponseWriter, r *http.Request, params api.ListBackfillGroupsParams) {
	pr, prob := s.pageOf(params.Limit, params.Offset, params.Cursor, groupListing, "id")
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	p := repo.BackfillGroupListParams{
		DagID:      params.DagId,
		ListParams: repo.ListParams{Limit: pr.repoLimit(), Offset: pr.offset, After: pr.after},
	}
	if params.State != nil {
		state := string(*params.State)
		p.State = &state
	}
	groups, total, err := s.store.BackfillGroupList(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	groups, next := nextCursor(groups, pr, groupListing, "id", func(g repo.BackfillGroup) string { return strconv.FormatInt(g.ID, 10) })
	s.writeJSON(w, r, http.StatusOK, api.BackfillGroupCollection{BackfillGroups: convertAll(groups, groupOut), TotalEntries: int64(total), NextCursor: next})
}

// GetBackfillGroup answers one group with its members.
func (s *Server) GetBackfillGroup(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerGroup(w, r, s.store.BackfillGroupGet, id)
}

// groupSettings is the body of PATCH /backfill_groups/{id}: a merge patch, each field left
// out kept (the spec validator has checked their types and ranges).
type groupSettings struct {
	Priority      optional[int]    `json:"priority"`
	MaxActiveRuns optional[int]    `json:"max_active_runs"`
	MaxFailedRuns optional[int]    `json:"max_failed_runs"`
	Description   optional[string] `json:"description"`
}

// PatchBackfillGroup changes an active group's settings and its members'.
func (s *Server) PatchBackfillGroup(w http.ResponseWriter, r *http.Request, id int64) {
	var body groupSettings
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	if body.MaxActiveRuns.Set && body.MaxActiveRuns.Value == nil {
		writeProblem(w, badRequest("max_active_runs cannot be null", fieldErr("max_active_runs", "cannot be null")))
		return
	}
	if prob := s.checkPriorityField(body.Priority); prob != nil {
		writeProblem(w, *prob)
		return
	}
	g, err := s.store.BackfillGroupPatch(r.Context(), repo.GroupPatchParams{
		ID:             id,
		Priority:       body.Priority.Value,
		MaxActiveRuns:  body.MaxActiveRuns.Value,
		SetMaxFailed:   body.MaxFailedRuns.Set,
		MaxFailedRuns:  body.MaxFailedRuns.Value,
		SetDescription: body.Description.Set,
		Description:    body.Description.Value,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, groupOut(g))
}

// PauseBackfillGroup pauses a group and its members.
func (s *Server) PauseBackfillGroup(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerGroup(w, r, s.store.BackfillGroupPause, id)
}

// UnpauseBackfillGroup resumes a group and its members.
func (s *Server) UnpauseBackfillGroup(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerGroup(w, r, s.store.BackfillGroupUnpause, id)
}

// CancelBackfillGroup cancels every member's queued runs.
func (s *Server) CancelBackfillGroup(w http.ResponseWriter, r *http.Request, id int64) {
	s.answerGroup(w, r, s.store.BackfillGroupCancel, id)
}

func (s *Server) answerGroup(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, id int64) (repo.BackfillGroup, error), id int64) {
	g, err := op(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, groupOut(g))
}

func groupOut(g repo.BackfillGroup) api.BackfillGroup {
	return api.BackfillGroup{
		Id:                g.ID,
		DagIds:            nonNil([]string(g.DagIDs)),
		IncludeDownstream: api.BackfillGroupIncludeDownstream(g.IncludeDownstream),
		FromDate:          utc(g.FromDate),
		ToDate:            utc(g.ToDate),
		RunBackwards:      g.RunBackwards,
		DagRunConf:        confOut(g.DagRunConf),
		ReprocessBehavior: api.ReprocessBehavior(g.ReprocessBehavior),
		MaxActiveRuns:     int32(g.MaxActiveRuns),
		MaxFailedRuns:     int32Ptr(g.MaxFailedRuns),
		Description:       g.Description,
		Pool:              g.Pool,
		Priority:          int32(g.Priority),
		CodeRef:           g.CodeRef,
		CreatedBy:         g.CreatedBy,
		Reason:            g.Reason,
		State:             api.BackfillState(g.State),
		PauseReason:       (*api.BackfillGroupPauseReason)(g.PauseReason),
		PlanHash:          g.PlanHash,
		Dependencies:      g.Dependencies,
		CreatedAt:         utc(g.CreatedAt),
		UpdatedAt:         utc(g.UpdatedAt),
		CompletedAt:       utcPtr(g.CompletedAt),
		Members:           convertAll(g.Members, groupMemberOut),
		Progress:          progressOut(g.Progress()),
	}
}

func groupMemberOut(m repo.GroupMember) api.BackfillGroupMember {
	return api.BackfillGroupMember{
		DagId:      m.DagID,
		BackfillId: m.BackfillID,
		Depth:      int32(m.Depth),
		State:      api.BackfillState(m.State),
		Progress:   progressOut(m.Progress),
	}
}

func groupDryRunMemberOut(m repo.GroupDryRunMember) api.BackfillGroupDryRunMember {
	return api.BackfillGroupDryRunMember{
		DagId:         m.DagID,
		Depth:         int32(m.Depth),
		Runs:          convertAll(m.Slots, plannedOut),
		Blocked:       int64(m.Blocked),
		PlanHash:      m.PlanHash,
		Estimate:      estimateOut(m.Estimate),
		EstimateBasis: api.BackfillGroupDryRunMemberEstimateBasis(m.EstimateBasis),
	}
}

package handlers

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/repo"
)

// optional is a merge-patch field: Set tells a field left out from one sent as null.
type optional[T any] struct {
	Set   bool
	Value *T
}

// UnmarshalJSON is called for null too (the field is a value, not a pointer), which is what
// lets a merge patch tell "clear it" from "leave it".
func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Value = nil
		return nil
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	o.Value = &v
	return nil
}

// backfillSettings is the body of PATCH /backfills/{id} and of a retry; the spec validator
// has already checked that each field is one the operation takes, with its type and range.
type backfillSettings struct {
	MaxActiveRuns optional[int]             `json:"max_active_runs"`
	MaxFailedRuns optional[int]             `json:"max_failed_runs"`
	Description   optional[string]          `json:"description"`
	DagRunConf    optional[json.RawMessage] `json:"dag_run_conf"`
	Pool          optional[string]          `json:"pool"`
	Priority      optional[int]             `json:"priority"`
	// Only a retry takes these (the spec refuses them in a patch): see RetryBackfill.
	CodeRef      *string      `json:"code_ref"`
	Reason       *string      `json:"reason"`
	LogicalDates *[]time.Time `json:"logical_dates"`
}

// decodeOptionalBody decodes a body that may be absent (an empty body is the empty object).
func decodeOptionalBody(r *http.Request, v any) *api.Problem {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		p := badRequest("the request body could not be read", fieldErr("body", "could not be read"))
		return &p
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return decodeBody(r, v)
}

// PatchBackfill changes max_active_runs, max_failed_runs or description of an active backfill.
func (s *Server) PatchBackfill(w http.ResponseWriter, r *http.Request, id int64) {
	var body backfillSettings
	if p := decodeBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	if body.DagRunConf.Set {
		writeProblem(w, badRequest("dag_run_conf cannot be changed", fieldErr("dag_run_conf", "is not a field of a patch")))
		return
	}
	if body.CodeRef != nil || body.Reason != nil || body.LogicalDates != nil {
		// What the runs were created to run, why and which: the creation's record. The spec
		// validator refuses these first; this keeps the handler right without it.
		writeProblem(w, badRequest("code_ref, reason and logical_dates are fixed at creation",
			fieldErr("body", "code_ref, reason and logical_dates are not fields of a patch")))
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
	b, err := s.store.BackfillPatch(r.Context(), repo.BackfillPatchParams{
		ID:             id,
		MaxActiveRuns:  body.MaxActiveRuns.Value,
		SetMaxFailed:   body.MaxFailedRuns.Set,
		MaxFailedRuns:  body.MaxFailedRuns.Value,
		SetDescription: body.Description.Set,
		Description:    body.Description.Value,
		SetPool:        body.Pool.Set,
		Pool:           body.Pool.Value,
		Priority:       body.Priority.Value,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, backfillOut(b))
}

// RetryBackfill creates a backfill of a terminal backfill's failed and canceled slots.
func (s *Server) RetryBackfill(w http.ResponseWriter, r *http.Request, id int64, params api.RetryBackfillParams) {
	var body backfillSettings
	if p := decodeOptionalBody(r, &body); p != nil {
		writeProblem(w, *p)
		return
	}
	if body.MaxActiveRuns.Set && body.MaxActiveRuns.Value == nil {
		writeProblem(w, badRequest("max_active_runs cannot be null", fieldErr("max_active_runs", "cannot be null")))
		return
	}
	ifMatch, prob := parseIfMatch(params.IfMatch)
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	if prob := checkCodeRef(body.CodeRef); prob != nil {
		writeProblem(w, *prob)
		return
	}
	if prob := s.checkPriorityField(body.Priority); prob != nil {
		writeProblem(w, *prob)
		return
	}
	if body.LogicalDates != nil {
		stamps := map[string]time.Time{}
		addLogicalDates(stamps, *body.LogicalDates)
		if prob := checkTimestamps(stamps); prob != nil {
			writeProblem(w, *prob)
			return
		}
	}
	actor, prob := s.actor(r)
	if prob != nil {
		writeProblem(w, *prob)
		return
	}
	rp := repo.BackfillRetryParams{
		ParentID:       id,
		MaxActiveRuns:  body.MaxActiveRuns.Value,
		SetMaxFailed:   body.MaxFailedRuns.Set,
		MaxFailedRuns:  body.MaxFailedRuns.Value,
		SetDescription: body.Description.Set,
		Description:    body.Description.Value,
		IfMatch:        ifMatch,
		SetPool:        body.Pool.Set,
		Pool:           body.Pool.Value,
		CodeRef:        body.CodeRef,
		CreatedBy:      actor,
		LogicalDates:   derefDates(body.LogicalDates),
		Reason:         body.Reason,
		Priority:       body.Priority.Value,
	}
	if body.DagRunConf.Set {
		rp.SetConf = true
		if body.DagRunConf.Value != nil {
			rp.DagRunConf = repo.JSON(*body.DagRunConf.Value)
		}
	}
	if params.IdempotencyKey != nil {
		rp.IdempotencyKey = *params.IdempotencyKey
	}
	b, replayed, err := s.store.BackfillRetry(r.Context(), rp)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.answerCreated(w, r, b, replayed)
}

// answerCreated answers a created (or replayed) backfill.
func (s *Server) answerCreated(w http.ResponseWriter, r *http.Request, b repo.Backfill, replayed bool) {
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		// Who made which backfill, and why, in the log too: the access log does not say.
		s.log(r).Info("backfill created", "backfill_id", b.ID, "dag_id", b.DagID,
			"created_by", valueOr(b.CreatedBy), "reason", valueOr(b.Reason), "code_ref", valueOr(b.CodeRef))
	}
	w.Header().Set("Location", "/api/v1/backfills/"+strconv.FormatInt(b.ID, 10))
	s.writeJSON(w, r, http.StatusCreated, backfillOut(b))
}

// parseIfMatch reads If-Match: nil when absent or "*" (check nothing), else the plan hashes
// it names. Weak tags never match under the strong comparison If-Match asks for, so they are
// dropped (leaving possibly none, which nothing matches).
func parseIfMatch(h *string) ([]string, *api.Problem) {
	if h == nil || strings.TrimSpace(*h) == "*" {
		return nil, nil
	}
	tags := []string{}
	for _, part := range strings.Split(*h, ",") {
		tag := strings.TrimSpace(part)
		if strings.HasPrefix(tag, "W/") {
			continue
		}
		if len(tag) < 2 || tag[0] != '"' || tag[len(tag)-1] != '"' {
			p := badRequest(`If-Match must be "*" or quoted plan hashes`, fieldErr("If-Match", `must be "*" or a list of quoted plan hashes`))
			return nil, &p
		}
		tags = append(tags, tag[1:len(tag)-1])
	}
	return tags, nil
}

// etag quotes a plan hash as an entity tag.
func etag(hash string) string { return `"` + hash + `"` }

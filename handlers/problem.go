package handlers

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
	"github.com/go-chi/chi/v5/middleware"
)

// busyRetryAfterSeconds is what a client is told to wait after the database kept refusing a
// transaction for concurrency: long enough for a burst of conflicting requests to drain.
const busyRetryAfterSeconds = 1

// timeoutRetryAfterSeconds is longer: a statement that ran into its time limit did so under
// load or on a large request, and the same request at once would likely meet it again.
const timeoutRetryAfterSeconds = 5

// problem builds an RFC 9457 problem with a stable code.
func problem(status int, code api.ProblemCode, detail string) api.Problem {
	return api.Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: int32(status),
		Detail: detail,
		Code:   code,
	}
}

// badRequest is the 400 for a request that cannot be read as the spec describes it.
func badRequest(detail string, fields ...api.FieldError) api.Problem {
	p := problem(http.StatusBadRequest, "invalid_request", detail)
	if fields == nil {
		fields = []api.FieldError{}
	}
	p.Errors = &fields
	return p
}

func writeProblem(w http.ResponseWriter, p api.Problem) {
	h := w.Header()
	h["Content-Type"] = problemContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(int(p.Status))
	buf := answerBuffers.Get().(*[]byte)
	defer putAnswerBuffer(buf)
	*buf, _ = appendAnswer((*buf)[:0], p) // a Problem always encodes
	_, _ = w.Write(*buf)                  // the client hung up; nothing to do
}

// writeError turns any error of a handler into its answer: the one place where domain errors
// meet HTTP. Unknown errors are logged once here and answered without their text.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var running *repo.BackfillAlreadyRunningError
	var planChanged *domain.PlanChangedError
	switch {
	case errors.As(err, &planChanged):
		p := problem(http.StatusPreconditionFailed, "plan_changed",
			"the plan is no longer the one If-Match names; nothing was created: dry-run again")
		p.CurrentPlanHash = &planChanged.CurrentPlanHash
		writeProblem(w, p)
	case errors.Is(err, repo.ErrBackfillNotTerminal):
		writeProblem(w, problem(http.StatusConflict, "backfill_not_terminal", err.Error()))
	case errors.Is(err, repo.ErrRunsInFlight):
		writeProblem(w, problem(http.StatusConflict, "runs_in_flight", err.Error()))
	case errors.As(err, &running):
		p := problem(http.StatusConflict, "backfill_already_running",
			"the DAG already has an active backfill; wait for it to finish or cancel it")
		p.ActiveBackfillId = &running.ActiveBackfillID
		writeProblem(w, p)
	case errors.Is(err, repo.ErrDagNotFound):
		writeProblem(w, problem(http.StatusNotFound, "dag_not_found", "no DAG with this dag_id"))
	case errors.Is(err, repo.ErrBackfillNotFound):
		writeProblem(w, problem(http.StatusNotFound, "backfill_not_found", "no backfill with this id"))
	case errors.Is(err, repo.ErrRunNotFound):
		writeProblem(w, problem(http.StatusNotFound, "run_not_found", "no run with this id"))
	case errors.Is(err, repo.ErrPoolNotFound):
		writeProblem(w, problem(http.StatusNotFound, "pool_not_found", "no pool with this name"))
	case errors.Is(err, repo.ErrUnknownPool):
		writeProblem(w, problem(http.StatusUnprocessableEntity, "pool_not_found", err.Error()))
	case errors.Is(err, repo.ErrPoolInUse):
		writeProblem(w, problem(http.StatusConflict, "pool_in_use",
			"an active backfill or a queued or running run names the pool"))
	case errors.Is(err, repo.ErrWebhookNotFound):
		writeProblem(w, problem(http.StatusNotFound, "webhook_not_found", "no webhook with this id"))
	case errors.Is(err, repo.ErrInvalidWebhook):
		writeProblem(w, problem(http.StatusUnprocessableEntity, "invalid_webhook", err.Error()))
	case errors.Is(err, repo.ErrRunAlreadyExists):
		writeProblem(w, problem(http.StatusConflict, "run_already_exists", "the DAG already has a run for this logical_date"))
	case errors.Is(err, repo.ErrBackfillNotActive):
		writeProblem(w, problem(http.StatusConflict, "backfill_not_active", err.Error()))
	case errors.Is(err, repo.ErrInvalidTransition):
		writeProblem(w, problem(http.StatusConflict, "invalid_transition",
			"a report moves a queued or running run to success, failed or canceled; only a claim starts a run"))
	case errors.Is(err, repo.ErrLeaseLost):
		writeProblem(w, problem(http.StatusConflict, "lease_lost", "the run is not running under a live lease of this worker"))
	case errors.Is(err, domain.ErrInvalidDag):
		writeProblem(w, problem(http.StatusUnprocessableEntity, "invalid_dag", err.Error()))
	case errors.Is(err, domain.ErrInvalidBackfill):
		writeProblem(w, problem(http.StatusUnprocessableEntity, "invalid_backfill", err.Error()))
	case errors.Is(err, repo.ErrNoRunsToCreate):
		writeProblem(w, problem(http.StatusUnprocessableEntity, "no_runs_to_create", err.Error()))
	case errors.Is(err, domain.ErrTooManyRuns):
		writeProblem(w, tooManyRuns(err))
	case errors.Is(err, domain.ErrInvalidLogicalDates):
		writeProblem(w, invalidLogicalDates(err))
	case errors.Is(err, repo.ErrIdempotencyKeyReused):
		writeProblem(w, problem(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different request"))
	case errors.Is(err, repo.ErrRetriesExhausted):
		s.log(r).Warn("transaction retries exhausted", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "busy", "too many concurrent changes; retry shortly"))
	case errors.Is(err, repo.ErrLockWait):
		s.log(r).Warn("lock wait exceeded", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "busy",
			"waited LOCK_WAIT for a row another request holds; nothing was written"))
	case r.Context().Err() != nil:
		// The client went away (lib/pq then reports its canceled statement as 57014, like a
		// timeout); nobody reads this answer.
		writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", "request canceled"))
	case repo.IsStatementTimeout(err):
		s.log(r).Warn("statement timeout", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(timeoutRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "timeout",
			"a database statement ran into its time limit and was stopped; nothing was changed. "+
				"The same request may meet the limit again: retry later or ask for less"))
	case errors.Is(err, repo.ErrOutcomeUnknown):
		// The one answer for every change whose session died after it was sent, COMMIT or an
		// autocommit statement: nothing re-sent it, so it happened at most once.
		s.log(r).Error("connection lost after a change was sent", "err", err)
		s.answers.OutcomeUnknown()
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "outcome_unknown",
			"the change may or may not have been applied; retrying with the same Idempotency-Key is safe"))
	case repo.IsUnavailable(err):
		s.log(r).Error("database unavailable", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		detail := "the database cannot be reached; retry shortly"
		switch {
		case repo.IsReadOnly(err):
			detail = "the database accepts no writes (a standby, or a failover in progress); nothing was changed; retry shortly"
		case errors.Is(err, repo.ErrUnavailable):
			detail = "no writable database host could be reached (every host down, read-only or a standby) " +
				"for the reconnect wait; nothing was changed; retry shortly"
		}
		writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", detail))
	default:
		s.log(r).Error("internal error", "err", err)
		writeProblem(w, problem(http.StatusInternalServerError, "internal", "internal error"))
	}
}

func (s *Server) log(r *http.Request) *slog.Logger {
	return s.logger.With("request_id", middleware.GetReqID(r.Context()), "method", r.Method, "path", r.URL.Path)
}

// tooManyRuns is the 422 of a window over MAX_BACKFILL_RUNS, with the window's slot count
// (when it was counted exactly) and the cap as members, so that a program can split the
// window without reading the detail.
func tooManyRuns(err error) api.Problem {
	p := problem(http.StatusUnprocessableEntity, "too_many_runs", err.Error())
	var tm *domain.TooManyRunsError
	if errors.As(err, &tm) {
		limit := int64(tm.MaxRuns)
		p.MaxBackfillRuns = &limit
		if tm.Exact {
			n := int64(tm.Slots)
			p.Slots = &n
		}
	}
	return p
}

// invalidLogicalDates is the 422 of chosen dates that are not slots, naming the first of them
// as a member too, so that a program can drop them without reading the detail.
func invalidLogicalDates(err error) api.Problem {
	p := problem(http.StatusUnprocessableEntity, "invalid_logical_dates", err.Error())
	var bad *domain.InvalidLogicalDatesError
	if errors.As(err, &bad) {
		dates := make([]time.Time, len(bad.Dates))
		for i, d := range bad.Dates {
			dates[i] = d.UTC()
		}
		p.LogicalDates = &dates
	}
	return p
}

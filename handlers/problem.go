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
	fields = nonNil(fields)
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

// errorAnswer is the answer to one domain error: its status, its stable code and its detail
// ("" answers the error's own text), and members that some answers carry beside them.
type errorAnswer struct {
	err     error
	status  int
	code    api.ProblemCode
	detail  string
	members func(p *api.Problem, err error)
}

// errorAnswers is the table of domain errors and their answers (wtf's codes table); the
// first row whose error errors.Is matches answers, so the order of rows is the order of
// precedence.
var errorAnswers = []errorAnswer{
	{err: domain.ErrPlanChanged, status: http.StatusPreconditionFailed, code: "plan_changed",
		detail: "the plan is no longer the one If-Match names; nothing was created: dry-run again", members: planChanged},
	{err: repo.ErrBackfillNotTerminal, status: http.StatusConflict, code: "backfill_not_terminal"},
	{err: repo.ErrRunsInFlight, status: http.StatusConflict, code: "runs_in_flight"},
	{err: repo.ErrBackfillAlreadyRunning, status: http.StatusConflict, code: "backfill_already_running",
		detail: "", members: alreadyRunning},
	{err: repo.ErrDagNotFound, status: http.StatusNotFound, code: "dag_not_found", detail: "no DAG with this dag_id"},
	{err: repo.ErrBackfillNotFound, status: http.StatusNotFound, code: "backfill_not_found", detail: "no backfill with this id"},
	{err: repo.ErrGroupNotFound, status: http.StatusNotFound, code: "backfill_group_not_found", detail: "no backfill group with this id"},
	{err: repo.ErrManagedByGroup, status: http.StatusConflict, code: "managed_by_group"},
	{err: domain.ErrTooManyDependencies, status: http.StatusUnprocessableEntity, code: "too_many_dependencies", members: tooManyDependencies},
	{err: repo.ErrRunNotFound, status: http.StatusNotFound, code: "run_not_found", detail: "no run with this id"},
	{err: repo.ErrPoolNotFound, status: http.StatusNotFound, code: "pool_not_found", detail: "no pool with this name"},
	{err: repo.ErrUnknownPool, status: http.StatusUnprocessableEntity, code: "pool_not_found"},
	{err: repo.ErrPoolInUse, status: http.StatusConflict, code: "pool_in_use",
		detail: "an active backfill or a queued or running run names the pool"},
	{err: repo.ErrWebhookNotFound, status: http.StatusNotFound, code: "webhook_not_found", detail: "no webhook with this id"},
	{err: repo.ErrInvalidWebhook, status: http.StatusUnprocessableEntity, code: "invalid_webhook"},
	{err: repo.ErrRunAlreadyExists, status: http.StatusConflict, code: "run_already_exists",
		detail: "the DAG already has a run for this logical_date"},
	{err: repo.ErrBackfillNotActive, status: http.StatusConflict, code: "backfill_not_active"},
	{err: repo.ErrInvalidTransition, status: http.StatusConflict, code: "invalid_transition",
		detail: "a report moves a queued or running run to success, failed or canceled; only a claim starts a run"},
	{err: repo.ErrLeaseLost, status: http.StatusConflict, code: "lease_lost",
		detail: "the run is not running under a live lease of this worker"},
	{err: domain.ErrInvalidDag, status: http.StatusUnprocessableEntity, code: "invalid_dag"},
	{err: domain.ErrDependencyCycle, status: http.StatusUnprocessableEntity, code: "dependency_cycle", members: dependencyCycle},
	{err: repo.ErrUnknownUpstream, status: http.StatusUnprocessableEntity, code: "dag_not_found"},
	{err: repo.ErrDagHasDownstreams, status: http.StatusConflict, code: "dag_has_downstreams", members: dagHasDownstreams},
	{err: domain.ErrInvalidBackfill, status: http.StatusUnprocessableEntity, code: "invalid_backfill"},
	{err: repo.ErrNoRunsToCreate, status: http.StatusUnprocessableEntity, code: "no_runs_to_create"},
	{err: domain.ErrTooManyRuns, status: http.StatusUnprocessableEntity, code: "too_many_runs", members: tooManyRuns},
	{err: domain.ErrInvalidLogicalDates, status: http.StatusUnprocessableEntity, code: "invalid_logical_dates",
		members: invalidLogicalDates},
	{err: repo.ErrIdempotencyKeyReused, status: http.StatusUnprocessableEntity, code: "idempotency_key_reused",
		detail: "this Idempotency-Key was used with a different request"},
}

// writeError turns any error of a handler into its answer: the one place where domain errors
// meet HTTP. Domain errors are answered from errorAnswers; the database's refusals become
// 503s with a Retry-After; unknown errors are logged once here and answered without their
// text.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	for _, a := range errorAnswers {
		if errors.Is(err, a.err) {
			detail := a.detail
			if detail == "" {
				detail = err.Error()
			}
			p := problem(a.status, a.code, detail)
			if a.members != nil {
				a.members(&p, err)
			}
			writeProblem(w, p)
			return
		}
	}
	switch {
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

// planChanged names the digest of the plan as it is now, for the client's next If-Match.
func planChanged(p *api.Problem, err error) {
	var pc *domain.PlanChangedError
	if errors.As(err, &pc) {
		p.CurrentPlanHash = &pc.CurrentPlanHash
	}
}

// alreadyRunning names the backfill that holds the DAG's active slot and, for a group, every
// member DAG's.
func alreadyRunning(p *api.Problem, err error) {
	p.Detail = "the DAG already has an active backfill; wait for it to finish or cancel it"
	var running *repo.BackfillAlreadyRunningError
	if errors.As(err, &running) {
		p.ActiveBackfillId = &running.ActiveBackfillID
		if running.Conflicts != nil {
			p.Detail = "DAGs of the group already have an active backfill (conflicts lists them); nothing was created"
			conflicts := make([]api.GroupConflict, len(running.Conflicts))
			for i, c := range running.Conflicts {
				conflicts[i] = api.GroupConflict{DagId: c.DagID, ActiveBackfillId: c.ActiveBackfillID}
			}
			p.Conflicts = &conflicts
		}
	}
}

// tooManyDependencies gives the 422 of a group over MAX_RUN_DEPENDENCIES the count and the cap.
func tooManyDependencies(p *api.Problem, err error) {
	var tm *domain.TooManyDependenciesError
	if errors.As(err, &tm) {
		p.Dependencies, p.MaxRunDependencies = &tm.Count, &tm.Max
	}
}

// dependencyCycle gives the 422 of a definition that would close a cycle the cycle itself.
func dependencyCycle(p *api.Problem, err error) {
	var c *domain.DependencyCycleError
	if errors.As(err, &c) {
		p.Cycle = &c.Path
	}
}

// dagHasDownstreams gives the 409 of a delete the DAGs that still depend on the DAG.
func dagHasDownstreams(p *api.Problem, err error) {
	var d *repo.DagHasDownstreamsError
	if errors.As(err, &d) {
		p.Downstreams = &d.Downstreams
	}
}

// tooManyRuns gives the 422 of a window over MAX_BACKFILL_RUNS the window's slot count (when
// it was counted exactly) and the cap as members, so that a program can split the window
// without reading the detail.
func tooManyRuns(p *api.Problem, err error) {
	var tm *domain.TooManyRunsError
	if errors.As(err, &tm) {
		limit := int64(tm.MaxRuns)
		p.MaxBackfillRuns = &limit
		if tm.Exact {
			n := int64(tm.Slots)
			p.Slots = &n
		}
	}
}

// invalidLogicalDates names, in the 422 of chosen dates that are not slots, the first of
// them as a member too, so that a program can drop them without reading the detail.
func invalidLogicalDates(p *api.Problem, err error) {
	var bad *domain.InvalidLogicalDatesError
	if errors.As(err, &bad) {
		dates := make([]time.Time, len(bad.Dates))
		for i, d := range bad.Dates {
			dates[i] = d.UTC()
		}
		p.LogicalDates = &dates
	}
}

package repo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// The errors repo returns. Handlers map them to HTTP answers in one place; nothing above
// this package inspects SQLSTATEs. Errors about a request's content that need no database
// (an invalid schedule or window, too many runs, a changed plan) are package domain's, and
// repo returns them under their domain names.
var (
	ErrDagNotFound            = errors.New("dag not found")
	ErrBackfillNotFound       = errors.New("backfill not found")
	ErrRunNotFound            = errors.New("run not found")
	ErrRunAlreadyExists       = errors.New("run already exists")
	ErrBackfillAlreadyRunning = errors.New("backfill already running")
	ErrBackfillNotActive      = errors.New("backfill not active")
	// ErrBackfillNotTerminal means a retry was asked of a backfill that is still active.
	ErrBackfillNotTerminal = errors.New("backfill not terminal")
	ErrInvalidTransition   = errors.New("invalid transition")
	ErrLeaseLost           = errors.New("lease lost")
	ErrNoRunsToCreate      = errors.New("no runs to create")
	// ErrRunsInFlight means a DAG cannot be deleted while a run outside backfills is queued
	// or running.
	ErrRunsInFlight         = errors.New("runs in flight")
	ErrIdempotencyKeyReused = errors.New("idempotency key reused")

	ErrPoolNotFound = errors.New("pool not found")
	// ErrUnknownPool: a write named a pool that does not exist (422, where ErrPoolNotFound is
	// the 404 of the pool's own path).
	ErrUnknownPool = errors.New("unknown pool")
	// ErrPoolInUse: an active backfill or an unfinished run names the pool.
	ErrPoolInUse = errors.New("pool in use")

	// ErrUnknownUpstream: a DAG named an upstream that does not exist (422 dag_not_found).
	ErrUnknownUpstream = errors.New("unknown upstream")
	// ErrDagHasDownstreams: a DAG that others name as an upstream cannot be deleted
	// (DagHasDownstreamsError names them).
	ErrDagHasDownstreams = errors.New("dag has downstreams")

	ErrGroupNotFound = errors.New("backfill group not found")
	// ErrManagedByGroup: pause, unpause and cancel of a group's member act on the group.
	ErrManagedByGroup = errors.New("managed by group")

	ErrWebhookNotFound = errors.New("webhook not found")
	ErrInvalidWebhook  = errors.New("invalid webhook")
)

// The database runtime's errors (pgrun), under repo's names so that handlers map every error
// from one package.
var (
	ErrRetriesExhausted = pgrun.ErrRetriesExhausted
	ErrStatementTimeout = pgrun.ErrStatementTimeout
	ErrLockWait         = pgrun.ErrLockWait
	ErrUnavailable      = pgrun.ErrUnavailable
	ErrOutcomeUnknown   = pgrun.ErrOutcomeUnknown
)

// IsUnavailable reports whether err means the database could not be reached, is shutting
// down, or accepts no writes (pgrun.IsUnavailable).
func IsUnavailable(err error) bool { return pgrun.IsUnavailable(err) }

// IsStatementTimeout reports whether a statement was stopped by its time limit, not by its
// caller's context (pgrun.IsStatementTimeout).
func IsStatementTimeout(err error) bool { return pgrun.IsStatementTimeout(err) }

// IsReadOnly reports whether the session's host accepts no writes (pgrun.IsReadOnly).
func IsReadOnly(err error) bool { return pgrun.IsReadOnly(err) }

// Errors that stay inside repo: each is turned into one of the above, or retried.
var (
	errIdempotencyKeyTaken     = errors.New("idempotency key taken")
	errConcurrentRunForDate    = fmt.Errorf("a concurrent run took a slot's date: %w", pgrun.ErrTryAgain)
	errBackfillUniqueViolation = errors.New("active backfill index violated")
)

// BackfillAlreadyRunningError carries the id of the backfill that holds the DAG's active slot.
type BackfillAlreadyRunningError struct {
	ActiveBackfillID int64
	// Conflicts, for a group, is every member DAG with an active backfill (the first is
	// ActiveBackfillID's).
	Conflicts []GroupConflict
}

// GroupConflict is a member DAG of a group request that has an active backfill.
type GroupConflict struct {
	DagID            string
	ActiveBackfillID int64
}

func (e *BackfillAlreadyRunningError) Error() string { return ErrBackfillAlreadyRunning.Error() }

// Is lets callers match with errors.Is(err, ErrBackfillAlreadyRunning).
func (e *BackfillAlreadyRunningError) Is(target error) bool {
	return target == ErrBackfillAlreadyRunning
}

// Names of constraints whose violations carry domain meaning.
const (
	constraintOneActivePerDag   = "backfills_one_active_per_dag"
	constraintRunPerDate        = "dag_runs_dag_id_logical_date_key"
	constraintRunIDPerDag       = "dag_runs_dag_id_run_id_key"
	constraintIdempotencyKeyKey = "idempotency_keys_pkey"
)

// uniqueViolation returns the constraint name of a 23505 error, or "".
func uniqueViolation(err error) string {
	if pqErr := pq.As(err, pqerror.UniqueViolation); pqErr != nil {
		return pqErr.Constraint
	}
	return ""
}

// DagHasDownstreamsError names the DAGs that depend on a DAG that was to be deleted.
type DagHasDownstreamsError struct{ Downstreams []string }

func (e *DagHasDownstreamsError) Error() string {
	return fmt.Sprintf("DAGs %s name this DAG as an upstream: change their upstreams first", strings.Join(e.Downstreams, ", "))
}

func (e *DagHasDownstreamsError) Is(target error) bool { return target == ErrDagHasDownstreams }

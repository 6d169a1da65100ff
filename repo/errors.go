package repo

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// Domain errors. Handlers map them to HTTP answers in one place; nothing above this package
// inspects SQLSTATEs.
var (
	ErrDagNotFound             = errors.New("dag not found")
	ErrBackfillNotFound        = errors.New("backfill not found")
	ErrRunNotFound             = errors.New("run not found")
	ErrRunAlreadyExists        = errors.New("run already exists")
	ErrBackfillAlreadyRunning  = errors.New("backfill already running")
	ErrBackfillNotActive       = errors.New("backfill not active")
	ErrInvalidTransition       = errors.New("invalid transition")
	ErrLeaseLost               = errors.New("lease lost")
	ErrInvalidBackfill         = errors.New("invalid backfill")
	ErrNoRunsToCreate          = errors.New("no runs to create")
	ErrTooManyRuns             = errors.New("too many runs")
	ErrIdempotencyKeyReused    = errors.New("idempotency key reused")
	ErrRetriesExhausted        = errors.New("serialization retries exhausted")
	errIdempotencyKeyTaken     = errors.New("idempotency key taken")
	errConcurrentRunForDate    = errors.New("a concurrent run took a slot's date")
	errBackfillUniqueViolation = errors.New("active backfill index violated")
)

// BackfillAlreadyRunningError carries the id of the backfill that holds the DAG's active slot.
type BackfillAlreadyRunningError struct {
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

// isRetryable reports whether a transaction failed only because of concurrency, so that
// running it again from a fresh BEGIN can succeed.
func isRetryable(err error) bool {
	if errors.Is(err, errConcurrentRunForDate) {
		return true
	}
	return pq.As(err, pqerror.TRSerializationFailure, pqerror.TRDeadlockDetected) != nil
}

// uniqueViolation returns the constraint name of a 23505 error, or "".
func uniqueViolation(err error) string {
	if pqErr := pq.As(err, pqerror.UniqueViolation); pqErr != nil {
		return pqErr.Constraint
	}
	return ""
}

// IsUnavailable reports whether err means the database could not be reached or is shutting
// down, as opposed to a fault in the request or in this code.
func IsUnavailable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	if pqErr := pq.As(err); pqErr != nil {
		// A FATAL error ends the session before the request ran, whatever its code: for
		// example 55000 from a database that refuses new connections.
		if pqErr.Fatal() {
			return true
		}
		switch pqErr.Code.Class() {
		case "08", // connection exception
			"53", // insufficient resources (too many connections, out of memory, disk full)
			"57": // operator intervention: shutdown, statement timeout, cannot connect now
			return true
		}
	}
	return false
}

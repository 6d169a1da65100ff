package repo

import (
	"context"
	"database/sql/driver"
	"errors"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
	"io"
	"net"
	"syscall"
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
	ErrRetriesExhausted     = errors.New("serialization retries exhausted")
	// ErrStatementTimeout: a statement ran into its time limit (statement_timeout) and was
	// stopped. Retrying the same request may well meet the same limit.
	ErrStatementTimeout = errors.New("statement timeout")
	// ErrLockWait: a statement waited LOCK_WAIT (lock_timeout) for a row another transaction
	// holds, and the transaction was rolled back: nothing was written.
	ErrLockWait = errors.New("lock wait exceeded")
	// ErrUnavailable: no usable database session within the reconnect wait (no host
	// answered, or none accepts writes).
	ErrUnavailable = errors.New("database unavailable")
	// ErrOutcomeUnknown: the session died after a change was sent and before its answer came
	// back, so the change may or may not have been applied. It is never retried inside the
	// server, by this package or by database/sql: a retry could apply the change twice. It is
	// the outcome of a COMMIT that got no answer, and of an autocommit write that got none.
	ErrOutcomeUnknown = errors.New("connection lost after a change was sent; outcome unknown")

	ErrPoolNotFound = errors.New("pool not found")
	// ErrUnknownPool: a write named a pool that does not exist (422, where ErrPoolNotFound is
	// the 404 of the pool's own path).
	ErrUnknownPool = errors.New("unknown pool")
	// ErrPoolInUse: an active backfill or an unfinished run names the pool.
	ErrPoolInUse = errors.New("pool in use")

	ErrWebhookNotFound = errors.New("webhook not found")
	ErrInvalidWebhook  = errors.New("invalid webhook")
)

// Errors that stay inside repo: each is turned into one of the above, or retried.
var (
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

// IsUnavailable reports whether err means the database could not be reached, is shutting
// down, or accepts no writes, as opposed to a fault in the request or in this code.
func IsUnavailable(err error) bool {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, context.DeadlineExceeded) || isSessionFailure(err) {
		return true
	}
	if pqErr := pq.As(err); pqErr != nil {
		switch pqErr.Code.Class() {
		case "53", // insufficient resources (too many connections, out of memory, disk full)
			"57": // operator intervention: shutdown, cannot connect now
			return pqErr.Code != pqerror.QueryCanceled
		}
	}
	return false
}

// IsStatementTimeout reports whether a statement was stopped by its time limit. lib/pq
// also answers 57014 when it cancels a statement because the caller's context ended; that
// one is the caller's doing and is reported as the context's error instead.
func IsStatementTimeout(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(err, ErrStatementTimeout) || pq.As(err, pqerror.QueryCanceled) != nil
}

// isLockNotAvailable reports 55P03: lock_timeout ran out (or a NOWAIT found the row held).
func isLockNotAvailable(err error) bool {
	return pq.As(err, pqerror.LockNotAvailable) != nil
}

// IsReadOnly reports whether the session's host accepts no writes: a hot standby, or a
// primary set read-only.
func IsReadOnly(err error) bool {
	return pq.As(err, pqerror.ReadOnlySQLTransaction) != nil
}

// isSessionFailure reports whether err means the session could not be used: it never
// opened, it was lost (closed, reset, terminated, the server shut down), or its host cannot
// write. Before COMMIT is sent such a transaction has not committed, so running it again on
// a fresh session is safe.
func isSessionFailure(err error) bool {
	var ce *connectError
	if errors.As(err, &ce) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	pqErr := pq.As(err)
	if pqErr == nil {
		return false
	}
	// A FATAL error ends the session, whatever its code: for example 55000 from a database
	// that refuses new connections.
	if pqErr.Fatal() || pqErr.Code.Class() == pqerror.ClassConnectionException {
		return true
	}
	switch pqErr.Code {
	case pqerror.AdminShutdown, pqerror.CrashShutdown, pqerror.CannotConnectNow,
		pqerror.ReadOnlySQLTransaction:
		return true
	}
	return false
}

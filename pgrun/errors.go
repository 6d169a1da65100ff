package pgrun

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

// The errors of the runtime. repo re-exports them under the same names, and handlers map
// them to HTTP answers; nothing above repo inspects SQLSTATEs.
var (
	ErrRetriesExhausted = errors.New("serialization retries exhausted")
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
	// ErrTryAgain: an attempt met a concurrent change that a fresh attempt will see (as a
	// serialization failure does). A caller wraps it in an error of its own; Do runs such an
	// attempt again under the serialization budget.
	ErrTryAgain = errors.New("concurrent change: try again")
)

// isRetryable reports whether a transaction failed only because of concurrency, so that
// running it again from a fresh BEGIN can succeed.
func isRetryable(err error) bool {
	if errors.Is(err, ErrTryAgain) {
		return true
	}
	return pq.As(err, pqerror.TRSerializationFailure, pqerror.TRDeadlockDetected) != nil
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
// It also takes PostgreSQL's other report of a lock_timeout, a cancel "due to user request":
// when the timeout fires as the lock is granted and the same statement then waits for another
// lock (an UPDATE of many rows following a chain of lockers), the new wait re-arms the timeout
// and clears its indicator, so the cancel already pending is reported as the user's (proc.c,
// ProcSleep). This runtime sends a cancel request only when its caller's context ends, which
// Do looks at first; a 57014 under a live context is that lock wait (CI saw a creation racing
// a DAG's delete answered 503 timeout with no statement_timeout set anywhere).
func isLockNotAvailable(err error) bool {
	if pq.As(err, pqerror.LockNotAvailable) != nil {
		return true
	}
	canceled := pq.As(err, pqerror.QueryCanceled)
	return canceled != nil && canceled.Message == cancelByUserMessage
}

// cancelByUserMessage is PostgreSQL's message for a cancel that no timeout claims, in English
// (lc_messages' default); under another language the cancel is answered as a statement
// timeout, a 503 that changed nothing as well.
const cancelByUserMessage = "canceling statement due to user request"

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

package pgrun

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/lib/pq"
)

// Connector wraps the driver's connector for the service's pool:
//
//   - A failed connection attempt is tried again, with a short jittered backoff, for up to
//     wait (DB_RECONNECT_WAIT) or until the caller's context ends. Nothing was sent, so this
//     is always safe, and it is the one place that covers every path: transactions, single
//     statements, prepared statements, and a stale pooled session that database/sql replaces
//     with a new one. A failover of a second or two is thus ridden inside the server.
//
//   - A failure that remains is marked as one (connectError): lib/pq reports "no host is
//     writable" (target_session_attrs) and a refused or half-open host as plain errors with
//     no SQLSTATE, which the mark lets IsUnavailable recognise without reading error text.
//
//   - Each session reports a lost answer to a change that may have reached the server as
//     ErrOutcomeUnknown instead of driver.ErrBadConn, so that database/sql never sends it again
//     on its own (outcome.go). A lib/pq connector is set to dial through a socket that counts
//     what was sent, which is how a session tells "nothing left" from "the answer was lost".
//
// Wrong credentials or a missing database are configuration, not an outage: they are not
// waited on.
func Connector(c driver.Connector, wait time.Duration) driver.Connector {
	countSockets(c, false)
	return connector{Connector: c, wait: wait}
}

// ConnectorBehindPooler is Connector for sessions that reach PostgreSQL through a transaction
// pooler (DB_POOLER=transaction), and it sends no cancel requests: when a request's context
// ends mid-statement, lib/pq would dial the pooler with a CancelRequest, and PgBouncer before
// 1.20 (Debian bookworm ships 1.18) exits on a cancel that races its client's close ("server
// in bad state: 11", pgbouncer#822, fixed by pgbouncer#927), dropping every replica's
// sessions. Without it the statement runs to its end, bounded by statement_timeout and
// LOCK_WAIT, and lib/pq then closes the session, which the pooler takes back cleanly.
func ConnectorBehindPooler(c driver.Connector, wait time.Duration) driver.Connector {
	countSockets(c, true)
	return connector{Connector: c, wait: wait}
}

type connector struct {
	driver.Connector
	wait time.Duration
}

type noReconnectWaitKey struct{}

// WithoutReconnectWait makes connections opened under ctx fail at the first refusal:
// readiness must say "not ready" at once rather than ride the outage out.
func WithoutReconnectWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noReconnectWaitKey{}, true)
}

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	start := time.Now()
	noWait := ctx.Value(noReconnectWaitKey{}) != nil
	for attempt := 1; ; attempt++ {
		slot := &dialSlot{}
		conn, err := c.Connector.Connect(context.WithValue(ctx, dialSlotKey{}, slot))
		if err == nil {
			return newSession(conn, slot), nil
		}
		left := c.wait - time.Since(start)
		if noWait || left <= 0 || ctx.Err() != nil || isConfigError(err) {
			return nil, &connectError{err: err}
		}
		if sleepCtx(ctx, min(reconnectBackoff(attempt), left)) != nil {
			return nil, &connectError{err: err}
		}
	}
}

// isConfigError: invalid authorization (28xxx) or a database that does not exist (3D000).
func isConfigError(err error) bool {
	pqErr := pq.As(err)
	return pqErr != nil && (pqErr.Code.Class() == "28" || pqErr.Code == "3D000")
}

// connectError is a failure to open a session, after the reconnect wait.
type connectError struct{ err error }

func (e *connectError) Error() string { return "connect: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// Is makes a failure to connect match ErrUnavailable: no session could be opened for the
// whole reconnect wait, so nothing was sent.
func (e *connectError) Is(target error) bool { return target == ErrUnavailable }

// Package pgrun is the service's database runtime: it owns the connection pools and is the
// one way onto them. Every statement runs inside one of its entry points, each of which hands
// its callback the pool or the transaction to use:
//
//   - Tx: a transaction, run again from a fresh BEGIN after a serialization failure, a
//     deadlock or a session lost before COMMIT was sent; never after a COMMIT whose answer was
//     lost (ErrOutcomeUnknown).
//   - Read: reads outside a transaction, sent again on a new session when theirs is lost, so
//     that every read rides a failover.
//   - Do: anything else under the same rules: a write of one statement (its lock wait bounded
//     by the attempt's share of LOCK_WAIT), or a look followed by one transaction (RunTx).
//   - AwaitDurable: wait until what this server shows committed is as durable as a commit.
//
// Under them, the pools' sessions (Connector) wait out a failed connect and report a lost
// answer to a change as ErrOutcomeUnknown instead of letting database/sql send it again, and
// the hot statements are prepared once per pooled connection (Hot).
package pgrun

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// Queryer is what an entry point hands a statement of its own: the pool. It is only ever
// given, never held by callers.
type Queryer = sqlx.ExtContext

// DefaultReconnectWait is how long an operation that could not get a usable session before
// anything could commit is run again before it gives up (DB_RECONNECT_WAIT).
const DefaultReconnectWait = 5 * time.Second

// Config tunes a DB. Zero values take the defaults.
type Config struct {
	// LeaseDB is a small pool of its own for the operations under OnLeasePool; nil uses the
	// main pool.
	LeaseDB *sqlx.DB
	// LockWait bounds how long an operation's statements wait for row locks in all
	// (DefaultLockWait when zero).
	LockWait time.Duration
	// ReconnectWait bounds how long an operation is run again while it finds no usable
	// session (DefaultReconnectWait when zero).
	ReconnectWait time.Duration
	// PrepareStatements prepares the statements run through Hot once per pooled connection.
	// Off behind a transaction pooler.
	PrepareStatements bool
	// OnRetry is called each time an operation is run again after a serialization failure or
	// a deadlock; nil calls nothing.
	OnRetry func()
	// Trace starts the span of one operation and returns the function that ends it with the
	// operation's error; nil traces nothing.
	Trace func(ctx context.Context) (context.Context, func(error))
}

// DB is the runtime over a pool (and an optional lease pool). It is safe for concurrent use.
type DB struct {
	db            *sqlx.DB
	leaseDB       *sqlx.DB
	lockWait      time.Duration
	firstAttempt  Attempt // firstAttempt(lockWait)
	reconnectWait time.Duration
	onRetry       func()
	trace         func(ctx context.Context) (context.Context, func(error))
	prepared      *preparedStatements
}

// New returns the runtime over db, whose sessions should come from Connector.
func New(db *sqlx.DB, cfg Config) *DB {
	d := &DB{
		db:            db,
		leaseDB:       cfg.LeaseDB,
		lockWait:      cfg.LockWait,
		reconnectWait: cfg.ReconnectWait,
		onRetry:       cfg.OnRetry,
		trace:         cfg.Trace,
		prepared:      &preparedStatements{enabled: cfg.PrepareStatements},
	}
	if d.leaseDB == nil {
		d.leaseDB = db
	}
	if d.lockWait <= 0 {
		d.lockWait = DefaultLockWait
	}
	if d.reconnectWait <= 0 {
		d.reconnectWait = DefaultReconnectWait
	}
	d.firstAttempt = firstAttempt(d.lockWait)
	return d
}

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// Resendable marks the error of a read made inside an attempt of Do (before its transaction):
// a session lost under a read changed nothing, so Do may run the attempt again.
func Resendable(err error) error {
	if err != nil && isSessionFailure(err) {
		return &errBeforeCommit{err}
	}
	return err
}

// ProbeWrite proves that the database accepts a write now: one transaction on db that writes
// a WAL record (durableMark) and commits, once, with no retry and no reconnect wait. A standby
// fails at BEGIN READ WRITE; a primary whose synchronous standby is gone (or that was left
// running after a failover) hangs at COMMIT until ctx ends, which is what readiness must see:
// reads still work there, writes do not. db is readiness's own pool (cmd/api): on the
// service's pool the probe would queue behind requests that ride an outage out or park on a
// held row, and answer late or "not ready" for a busy but healthy replica.
func ProbeWrite(ctx context.Context, db *sqlx.DB) error {
	tx, err := db.BeginTxx(WithoutReconnectWait(ctx), nil)
	if err != nil {
		return fmt.Errorf("probe write: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // after a COMMIT this is a no-op
	if _, err := tx.ExecContext(ctx, durableMark); err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("probe write: commit: %w", err)
	}
	return nil
}

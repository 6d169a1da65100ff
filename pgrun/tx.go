package pgrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// Retry budget for serialization failures. Measured: under 24 concurrent creates for one DAG a
// budget of 5 let some requests run out (503 where 409 was due); about 12 did not.
const (
	maxTxAttempts  = 12
	retryBaseDelay = 2 * time.Millisecond
	retryMaxDelay  = 250 * time.Millisecond
)

// Do runs attemptFn again while it fails for concurrency only (40001/40P01 or ErrTryAgain, at
// most maxTxAttempts times), or because its session failed before anything could have
// committed (RunTx and Read mark those; for up to ReconnectWait since the first such failure:
// a failover of a second or two is ridden inside the server instead of answered 503), or
// because a row lock was not granted within the attempt's share of LOCK_WAIT. attemptFn is a
// statement of its own on a.Pool, or a look followed by one transaction (RunTx). A single
// statement's session failures are not retried here (the statement may have committed on its
// own; the session reports that as ErrOutcomeUnknown, and database/sql has already run again
// one that failed before anything was sent), and a failure to connect has already been waited
// out by Connector.
func (d *DB) Do(ctx context.Context, attemptFn func(a Attempt) error) (err error) {
	if d.trace != nil {
		var end func(error)
		ctx, end = d.trace(ctx)
		defer func() { end(err) }()
	}
	var (
		serialization int
		reconnects    int
		firstLost     time.Time
		locks         = newLockBudget(d.lockWait)
	)
	a := d.firstAttempt
	a.Pool = d.pool(ctx)
	for {
		a.Ctx = ctx
		err := attemptFn(a)
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			// lib/pq reports a statement it canceled for the context as 57014, like a
			// statement timeout; the context's error says whose doing it was.
			if errors.Is(err, cerr) {
				return err
			}
			return fmt.Errorf("%w: %w", cerr, err)
		}
		var delay time.Duration
		switch {
		case isRetryable(err):
			serialization++
			if serialization >= maxTxAttempts {
				return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, maxTxAttempts, err)
			}
			if d.onRetry != nil {
				d.onRetry()
			}
			delay = backoff(serialization)
		case isRetrySafe(err):
			if firstLost.IsZero() {
				firstLost = time.Now()
			}
			left := d.reconnectWait - time.Since(firstLost)
			if left <= 0 {
				return fmt.Errorf("%w: no usable session for %s (%d retries): %w", ErrUnavailable, d.reconnectWait, reconnects, err)
			}
			reconnects++
			delay = min(reconnectBackoff(reconnects), left)
		case isLockNotAvailable(err):
			// Sent again at once with half of what is left of LOCK_WAIT (lockBudget), or,
			// once that is too little, answered: the row is held by a transaction that may
			// hold it for long.
			next, ok := locks.next()
			if !ok {
				return fmt.Errorf("%w: %w", ErrLockWait, err)
			}
			next.Pool = a.Pool
			a = next
		case IsStatementTimeout(err):
			return fmt.Errorf("%w: %w", ErrStatementTimeout, err)
		default:
			return err
		}
		if werr := sleepCtx(ctx, delay); werr != nil {
			return fmt.Errorf("waiting to retry transaction: %w: %w", werr, err)
		}
	}
}

// errBeforeCommit marks a session failure that happened before COMMIT was sent: at
// BEGIN or under one of the transaction's statements. The server rolls such a transaction
// back, so running it again cannot do its work twice.
type errBeforeCommit struct{ err error }

func (e *errBeforeCommit) Error() string { return e.err.Error() }
func (e *errBeforeCommit) Unwrap() error { return e.err }

// isRetrySafe reports whether err is a session failure marked by RunTx or Read as having come
// before anything could commit. A failure to connect is not: Connector has already waited
// for the database for as long as the service waits.
func isRetrySafe(err error) bool {
	var before *errBeforeCommit
	var ce *connectError
	return errors.As(err, &before) && !errors.As(err, &ce)
}

// Read runs reads outside any transaction under Do, on the pool that ctx names (OnLeasePool),
// which read is handed and reaches no other way: a session lost during a read changed
// nothing, so the read is sent again on a new session (a failover), as a transaction that
// never reached COMMIT is. Without it a request caught reading when the primary died answered
// 503 instead of riding the failover (TestPostgresFailover).
//
// Its sessions skip the check for a dead idle socket (session.ResetSession): a read sent on a
// session that died while idle fails and is sent again here, changing nothing, so the check's
// system call, a few microseconds of every status read, buys a read nothing.
func (d *DB) Read(ctx context.Context, read func(ctx context.Context, q Queryer) error) error {
	ctx = context.WithValue(ctx, resentIfLostKey{}, true)
	return d.Do(ctx, func(a Attempt) error {
		err := read(a.Ctx, a.Pool)
		if err != nil && isSessionFailure(err) {
			return &errBeforeCommit{err}
		}
		return err
	})
}

// Tx runs fn in a transaction at level under Do: when fn or COMMIT fails with 40001/40P01,
// it runs it again from a fresh BEGIN with capped, jittered backoff, and so it does when the
// session was lost before COMMIT was sent. fn must only do database work: it may run several
// times. After the last attempt it returns an error that matches ErrRetriesExhausted; a
// COMMIT whose answer was lost returns ErrOutcomeUnknown and is never run again.
func (d *DB) Tx(ctx context.Context, level sql.IsolationLevel, fn func(tx *sqlx.Tx) error) error {
	return d.Do(ctx, func(a Attempt) error { return d.RunTx(ctx, level, a, fn) })
}

// resentIfLostKey marks the context of a read that Read sends again when its session is lost.
type resentIfLostKey struct{}

// RunTx is one attempt of a transaction at level, for an attempt of Do that looks at
// something before its transaction (Tx is Do of RunTx alone). It begins on the pool ctx names,
// sets the attempt's lock wait, runs fn and commits; it marks a failure before COMMIT was sent
// as safe to run again and a lost answer to COMMIT as ErrOutcomeUnknown.
func (d *DB) RunTx(ctx context.Context, level sql.IsolationLevel, a Attempt, fn func(tx *sqlx.Tx) error) (err error) {
	beginCtx := ctx
	if a.Ctx != nil {
		beginCtx = a.Ctx
	}
	tx, err := d.pool(ctx).BeginTxx(beginCtx, &sql.TxOptions{Isolation: level})
	if err != nil {
		var ce *connectError
		if errors.As(err, &ce) {
			return fmt.Errorf("begin: %w: %w", ErrUnavailable, err)
		}
		err = fmt.Errorf("begin: %w", err)
		// 0A000 at BEGIN is a hot standby refusing SERIALIZABLE or READ WRITE: a node that
		// is still in recovery while a failover or a crash restart promotes it (behind HAProxy
		// or a pooler, the session reached it before its health check changed). Nothing ran.
		if isSessionFailure(err) || pq.As(err, pqerror.FeatureNotSupported) != nil {
			return &errBeforeCommit{err}
		}
		return err
	}
	defer func() {
		if err != nil {
			// The rollback error adds nothing: the transaction is already lost.
			_ = tx.Rollback()
		}
	}()
	if err = setLockWait(ctx, tx, a); err == nil {
		err = fn(tx)
	}
	if err != nil {
		if isSessionFailure(err) {
			return &errBeforeCommit{err}
		}
		return err
	}
	if err = tx.Commit(); err != nil {
		var notSent *commitNotSentError
		switch {
		case errors.As(err, &notSent):
			// Nothing of COMMIT left: the server rolls the transaction back.
			return &errBeforeCommit{fmt.Errorf("commit: %w", err)}
		case errors.Is(err, ErrOutcomeUnknown):
			return fmt.Errorf("commit: %w", err)
		case isSessionFailure(err):
			// COMMIT was sent (or may have been): whether it took effect is unknown.
			return fmt.Errorf("commit: %w: %w", ErrOutcomeUnknown, err)
		}
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Reconnect backoff: short, because a failover ends at an instant nobody announces and
// each request should notice within a fraction of a second; jittered, so that the requests
// that waited do not all reconnect at once.
const (
	reconnectBaseDelay = 10 * time.Millisecond
	reconnectMaxDelay  = 100 * time.Millisecond
)

func reconnectBackoff(attempt int) time.Duration {
	ceiling := reconnectBaseDelay << min(attempt, 8)
	if ceiling > reconnectMaxDelay {
		ceiling = reconnectMaxDelay
	}
	return ceiling/2 + time.Duration(rand.Int64N(int64(ceiling/2)))
}

// backoff doubles from retryBaseDelay up to retryMaxDelay and draws uniformly below that
// ("full jitter"), so that colliding transactions spread out instead of colliding again.
func backoff(attempt int) time.Duration {
	ceiling := retryBaseDelay << min(attempt, 16)
	if ceiling > retryMaxDelay {
		ceiling = retryMaxDelay
	}
	return time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond
}

// Backoff is the jittered delay before the attempt-th retry of a collision: full jitter below a
// ceiling that doubles from 2 ms to 250 ms.
func Backoff(attempt int) time.Duration { return backoff(attempt) }

// Sleep waits for d or until ctx ends, whichever comes first, and returns ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, d) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// durableMark writes the smallest WAL record a transaction can write without a table (a
// transactional logical-decoding message, ignored by every consumer that does not ask for
// its prefix), so that its COMMIT waits for the synchronous standby like any write's.
// Taking a transaction id alone is not enough: measured here, PostgreSQL skips the wait for
// a transaction that wrote no WAL before its commit record, and pg_current_xact_id() writes
// none.
const durableMark = `SELECT pg_logical_emit_message(true, 'backfill.durable', '')`

// AwaitDurable returns once everything this server has seen committed is as durable as a
// commit of its own: with synchronous replication, durableMark's commit is acknowledged only
// after the standby has all WAL up to it. Needed before answering from a row another
// transaction committed: PostgreSQL shows a commit to other sessions while it still waits
// for its synchronous standby (and keeps it when that wait is canceled), so a replay
// answered from it could acknowledge a backfill that a failover then loses. Without
// synchronous replication it costs one short commit.
func (d *DB) AwaitDurable(ctx context.Context) error {
	return d.Tx(ctx, sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, durableMark); err != nil {
			return fmt.Errorf("await durable: %w", err)
		}
		return nil
	})
}

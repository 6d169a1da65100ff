package repo

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

// inSerializableTx runs fn in a SERIALIZABLE transaction and, when fn or COMMIT fails with
// 40001/40P01, runs it again from a fresh BEGIN with capped, jittered backoff. fn must only do
// database work: it may run several times. After the last attempt it returns an error that
// matches ErrRetriesExhausted.
func (s *Store) inSerializableTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inTxWithRetry(ctx, sql.LevelSerializable, fn)
}

// inTx runs fn in a READ COMMITTED transaction, with the same retry rule: row-lock paths can
// still meet a deadlock (40P01) that the database resolves by aborting one side.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inTxWithRetry(ctx, sql.LevelReadCommitted, fn)
}

func (s *Store) inTxWithRetry(ctx context.Context, level sql.IsolationLevel, fn func(tx *sqlx.Tx) error) error {
	return s.withRetry(ctx, func(a attempt) error { return s.runTx(ctx, level, a, fn) })
}

// withRetry runs attempt again while it fails for concurrency only (40001/40P01, at most
// maxTxAttempts times), or because its session failed before anything could have committed
// (runTx marks those; for up to reconnectWait since the first such failure: a failover of a
// second or two is ridden inside the server instead of answered 503). A single statement
// outside a transaction uses it directly: its session failures are not retried here (the
// statement may have committed on its own; the session reports that as ErrOutcomeUnknown, and
// database/sql has already run again one that failed before anything was sent), and a failure
// to connect has already been waited out by Connector.
func (s *Store) withRetry(ctx context.Context, attemptFn func(a attempt) error) (err error) {
	if s.tracer != nil {
		var end func(error)
		ctx, end = s.tracer.StartOperation(ctx, "github.com/backfillsvc/backfill/repo", "repo")
		defer func() { end(err) }()
	}
	var (
		serialization int
		reconnects    int
		firstLost     time.Time
		locks         = newLockBudget(s.lockWait)
	)
	a := s.firstAttempt
	for {
		a.ctx = ctx
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
			s.observer.TxRetried()
			delay = backoff(serialization)
		case isRetrySafe(err):
			if firstLost.IsZero() {
				firstLost = time.Now()
			}
			left := s.reconnectWait - time.Since(firstLost)
			if left <= 0 {
				return fmt.Errorf("%w: no usable session for %s (%d retries): %w", ErrUnavailable, s.reconnectWait, reconnects, err)
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

// isRetrySafe reports whether err is a session failure marked by runTx as having come
// before anything could commit. A failure to connect is not: Connector has already waited
// for the database for as long as the service waits.
func isRetrySafe(err error) bool {
	var before *errBeforeCommit
	var ce *connectError
	return errors.As(err, &before) && !errors.As(err, &ce)
}

// readRetried runs reads outside any transaction under withRetry: a session lost during a
// read changed nothing, so the read is sent again on a new session (a failover), as a
// transaction that never reached COMMIT is. Without it a request caught reading when the
// primary dies answers 503 instead of riding the failover (TestPostgresFailover: a creation
// reading the database clock).
//
// Its sessions skip the check for a dead idle socket (session.ResetSession): a read sent on a
// session that died while idle fails and is sent again here, changing nothing, so the check's
// system call, a few microseconds of every status read, buys a read nothing.
func (s *Store) readRetried(ctx context.Context, read func(ctx context.Context) error) error {
	ctx = context.WithValue(ctx, resentIfLostKey{}, true)
	return s.withRetry(ctx, func(a attempt) error {
		err := read(a.ctx)
		if err != nil && isSessionFailure(err) {
			return &errBeforeCommit{err}
		}
		return err
	})
}

// readValue is readRetried for a read that answers one value. The API's reads go through it
// or readTwo, so that a read caught by a failover rides it as a transaction does, instead of
// answering 503 once database/sql's own three attempts have met the dead primary (ha-test:
// a crash of the leader).
func readValue[T any](ctx context.Context, s *Store, read func(ctx context.Context) (T, error)) (T, error) {
	var out T
	err := s.readRetried(ctx, func(ctx context.Context) (err error) {
		out, err = read(ctx)
		return err
	})
	return out, err
}

// readTwo is readRetried for a read that answers two values: a page and its total, an
// idempotency key's ids and whether it was found, a DAG and the database's clock.
func readTwo[A, B any](ctx context.Context, s *Store, read func(ctx context.Context) (A, B, error)) (A, B, error) {
	var (
		a A
		b B
	)
	err := s.readRetried(ctx, func(ctx context.Context) (err error) {
		a, b, err = read(ctx)
		return err
	})
	return a, b, err
}

// resentIfLostKey marks the context of a read that readRetried sends again when its session
// is lost.
type resentIfLostKey struct{}

func (s *Store) runTx(ctx context.Context, level sql.IsolationLevel, a attempt, fn func(tx *sqlx.Tx) error) (err error) {
	beginCtx := ctx
	if a.ctx != nil {
		beginCtx = a.ctx
	}
	tx, err := s.txDB(ctx).BeginTxx(beginCtx, &sql.TxOptions{Isolation: level})
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

// isNoRows keeps sql.ErrNoRows checks short at call sites.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// durableMark writes the smallest WAL record a transaction can write without a table (a
// transactional logical-decoding message, ignored by every consumer that does not ask for
// its prefix), so that its COMMIT waits for the synchronous standby like any write's.
// Taking a transaction id alone is not enough: measured here, PostgreSQL skips the wait for
// a transaction that wrote no WAL before its commit record, and pg_current_xact_id() writes
// none.
const durableMark = `SELECT pg_logical_emit_message(true, 'backfill.durable', '')`

// awaitDurable returns once everything this server has seen committed is as durable as a
// commit of its own: with synchronous replication, durableMark's commit is acknowledged only
// after the standby has all WAL up to it. Needed before answering from a row another
// transaction committed: PostgreSQL shows a commit to other sessions while it still waits
// for its synchronous standby (and keeps it when that wait is canceled), so a replay
// answered from it could acknowledge a backfill that a failover then loses. Without
// synchronous replication it costs one short commit.
func (s *Store) awaitDurable(ctx context.Context) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, durableMark); err != nil {
			return fmt.Errorf("await durable: %w", err)
		}
		return nil
	})
}

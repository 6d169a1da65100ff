package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// The Store's ways onto the database, each a thin wrapper over its runtime (pgrun), which
// holds the pools: a statement runs only where one of them hands it a pool or a transaction,
// so every read rides a failover and no write is silently sent twice.

// attempt is what one attempt of an operation under withRetry is given.
type attempt struct {
	// ctx is the operation's context, with its span when tracing is on.
	ctx context.Context
	// lockWait is the attempt's lock_timeout in milliseconds, for statementLockWait.
	lockWait string
	// db is the pool, for a statement of its own.
	db pgrun.Queryer
	rt pgrun.Attempt
}

// inTx runs fn in a READ COMMITTED transaction, with the same retry rule: row-lock paths can
// still meet a deadlock (40P01) that the database resolves by aborting one side.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inTxWithRetry(ctx, sql.LevelReadCommitted, fn)
}

func (s *Store) inTxWithRetry(ctx context.Context, level sql.IsolationLevel, fn func(tx *sqlx.Tx) error) error {
	return s.pg.Tx(ctx, level, fn)
}

// withRetry runs attemptFn under the runtime's retry rules (pgrun.DB.Do): a statement of its
// own on a.db, or a look followed by one transaction (runTx).
func (s *Store) withRetry(ctx context.Context, attemptFn func(a attempt) error) error {
	return s.pg.Do(ctx, func(a pgrun.Attempt) error {
		return attemptFn(attempt{ctx: a.Ctx, lockWait: a.LockWait, db: a.Pool, rt: a})
	})
}

// runTx is one attempt of a transaction, inside withRetry.
func (s *Store) runTx(ctx context.Context, level sql.IsolationLevel, a attempt, fn func(tx *sqlx.Tx) error) error {
	return s.pg.RunTx(ctx, level, a.rt, fn)
}

// readRetried runs reads outside any transaction on the pool it hands them, sent again on a
// new session when theirs is lost (pgrun.DB.Read).
func (s *Store) readRetried(ctx context.Context, read func(ctx context.Context, q pgrun.Queryer) error) error {
	return s.pg.Read(ctx, read)
}

// readValue is readRetried for a read that answers one value.
func readValue[T any](ctx context.Context, s *Store, read func(ctx context.Context, q pgrun.Queryer) (T, error)) (T, error) {
	var out T
	err := s.pg.Read(ctx, func(ctx context.Context, q pgrun.Queryer) (err error) {
		out, err = read(ctx, q)
		return err
	})
	return out, err
}

// readTwo is readRetried for a read that answers two values: a page and its total, an
// idempotency key's ids and whether it was found, a DAG and the database's clock.
func readTwo[A, B any](ctx context.Context, s *Store, read func(ctx context.Context, q pgrun.Queryer) (A, B, error)) (A, B, error) {
	var (
		a A
		b B
	)
	err := s.pg.Read(ctx, func(ctx context.Context, q pgrun.Queryer) (err error) {
		a, b, err = read(ctx, q)
		return err
	})
	return a, b, err
}

// awaitDurable returns once everything this server has seen committed is as durable as a
// commit of its own (pgrun.DB.AwaitDurable).
func (s *Store) awaitDurable(ctx context.Context) error { return s.pg.AwaitDurable(ctx) }

// hot runs query prepared on the pool ctx names when preparing is on (pgrun.DB.Hot); q is that
// pool, as an entry point handed it, or a transaction begun on it.
func (s *Store) hot(ctx context.Context, q sqlx.QueryerContext, query string) sqlx.QueryerContext {
	return s.pg.Hot(ctx, q, query)
}

// prepareHot prepares query before a transaction that runs it through hot.
func (s *Store) prepareHot(ctx context.Context, query string) { s.pg.PrepareHot(ctx, query) }

// onLeasePool sends the operations run under ctx to the lease pool (Config.LeaseDB).
func onLeasePool(ctx context.Context) context.Context { return pgrun.OnLeasePool(ctx) }

// statementLockWait bounds the lock waits of a write made in one statement of its own by the
// attempt's lockWait, passed as the statement's parameter param (pgrun.StatementLockWait).
func statementLockWait(param string) string { return pgrun.StatementLockWait(param) }

// deleted runs one DELETE of its own under withRetry and says how many rows it removed; what
// names it in its error.
func (s *Store) deleted(ctx context.Context, what, query string, args ...any) (int, error) {
	var n int64
	err := s.withRetry(ctx, func(a attempt) error {
		res, err := a.db.ExecContext(a.ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return int(n), nil
}

// isNoRows keeps sql.ErrNoRows checks short at call sites.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

func sleepCtx(ctx context.Context, d time.Duration) error { return pgrun.Sleep(ctx, d) }

func backoff(attempt int) time.Duration { return pgrun.Backoff(attempt) }

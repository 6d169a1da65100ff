package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jmoiron/sqlx"
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
	return s.withRetry(ctx, func() error { return s.runTx(ctx, level, fn) })
}

// withRetry runs attempt again, with the same rule, while it fails for concurrency only. A
// single statement outside a transaction uses it directly.
func (s *Store) withRetry(ctx context.Context, attemptFn func() error) error {
	var err error
	for attempt := 1; attempt <= maxTxAttempts; attempt++ {
		err = attemptFn()
		if err == nil || !isRetryable(err) {
			return err
		}
		if attempt == maxTxAttempts {
			break
		}
		s.observer.TxRetried()
		if werr := sleepCtx(ctx, backoff(attempt)); werr != nil {
			return fmt.Errorf("waiting to retry transaction: %w", werr)
		}
	}
	return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, maxTxAttempts, err)
}

func (s *Store) runTx(ctx context.Context, level sql.IsolationLevel, fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			// The rollback error adds nothing: the transaction is already lost.
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
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

package pgrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// countingObserver counts the runtime's retries (Config.OnRetry).
type countingObserver struct {
	retried atomic.Int64
}

func (o *countingObserver) TxRetried() { o.retried.Add(1) }

// txTestStore is a runtime on a fresh database with a scratch table, and its observer.
func txTestStore(t *testing.T) (*DB, *countingObserver) {
	t.Helper()
	db, _ := pgtest.Open(t)
	_, err := db.Exec(`CREATE TABLE tx_probe (k integer PRIMARY KEY)`)
	require.NoError(t, err)
	obs := &countingObserver{}
	return New(db, Config{OnRetry: obs.TxRetried}), obs
}

func serializationFailure() error {
	return fmt.Errorf("insert probe: %w", &pq.Error{Code: "40001", Message: "could not serialize access"})
}

func probeRows(t *testing.T, s *DB) []int {
	t.Helper()
	var ks []int
	require.NoError(t, s.db.Select(&ks, `SELECT k FROM tx_probe ORDER BY k`))
	return ks
}

// A fn that fails with 40001 (wrapped, as the repository wraps everything) runs again from a
// fresh BEGIN: the failed attempts' writes are rolled back, each attempt is a new transaction,
// and the observer counts one retry per re-run.
func TestTxRetriesSerializationFailureFromAFreshBegin(t *testing.T) {
	t.Parallel()
	s, obs := txTestStore(t)
	var attempts int
	txids := map[int64]bool{}
	err := s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error {
		attempts++
		var txid int64
		require.NoError(t, tx.Get(&txid, `SELECT txid_current()`))
		txids[txid] = true
		var level string
		require.NoError(t, tx.Get(&level, `SHOW transaction_isolation`))
		require.Equal(t, "serializable", level)
		if _, err := tx.Exec(`INSERT INTO tx_probe VALUES ($1)`, attempts); err != nil {
			return err
		}
		if attempts < 3 {
			return serializationFailure()
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, attempts)
	require.Len(t, txids, 3, "each attempt is its own transaction")
	require.Equal(t, []int{3}, probeRows(t, s), "the failed attempts were rolled back")
	require.EqualValues(t, 2, obs.retried.Load(), "two re-runs")

	// A deadlock (40P01) is retried too, at READ COMMITTED as well.
	attempts = 0
	err = s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		if attempts == 1 {
			return fmt.Errorf("lock runs: %w", &pq.Error{Code: "40P01", Message: "deadlock detected"})
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, attempts)
	require.EqualValues(t, 3, obs.retried.Load())
}

// A real serialization failure: two transactions each read the table and insert into it
// (write skew). PostgreSQL aborts one with 40001, at its INSERT or at COMMIT; the helper runs
// it again and both commit.
func TestTxRetriesARealSerializationFailure(t *testing.T) {
	t.Parallel()
	s, obs := txTestStore(t)
	var (
		bothRead sync.WaitGroup
		attempts atomic.Int64
		wg       sync.WaitGroup
		errs     [2]error
	)
	bothRead.Add(2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			errs[i] = s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error {
				attempts.Add(1)
				var n int
				if err := tx.Get(&n, `SELECT count(*) FROM tx_probe`); err != nil {
					return fmt.Errorf("count: %w", err)
				}
				if first {
					// Both read before either writes.
					first = false
					bothRead.Done()
					bothRead.Wait()
				}
				if _, err := tx.Exec(`INSERT INTO tx_probe VALUES ($1)`, 10*i+n); err != nil {
					return fmt.Errorf("insert: %w", err)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Len(t, probeRows(t, s), 2)
	require.GreaterOrEqual(t, attempts.Load(), int64(3), "one of the two was aborted and ran again")
	require.EqualValues(t, attempts.Load()-2, obs.retried.Load())
}

// After maxTxAttempts failures the helper gives up with an error that matches
// ErrRetriesExhausted and still carries the SQLSTATE.
func TestTxGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	s, obs := txTestStore(t)
	var attempts int
	start := time.Now()
	err := s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error {
		attempts++
		return serializationFailure()
	})
	took := time.Since(start)
	require.ErrorIs(t, err, ErrRetriesExhausted)
	require.NotNil(t, pq.As(err, "40001"), "the cause stays in the chain: %v", err)
	require.Equal(t, maxTxAttempts, attempts)
	// Capped backoff: the whole budget is bounded.
	require.Less(t, took, time.Duration(maxTxAttempts)*(retryMaxDelay+time.Millisecond)+time.Second)
	t.Logf("%d attempts in %s, %d retries observed", attempts, took.Round(time.Millisecond), obs.retried.Load())
}

// The observer (backfill_tx_retries_total, "transactions run again after a serialization
// failure or deadlock") counts re-runs: a transaction that gives up after maxTxAttempts
// attempts was run again maxTxAttempts-1 times.
func TestTxObserverCountsReRunsNotFailures(t *testing.T) {
	t.Parallel()
	s, obs := txTestStore(t)
	err := s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error { return serializationFailure() })
	require.ErrorIs(t, err, ErrRetriesExhausted)
	require.EqualValues(t, maxTxAttempts-1, obs.retried.Load(),
		"after %d attempts there were %d re-runs", maxTxAttempts, maxTxAttempts-1)
}

// A canceled context stops the retries: during the backoff, by a deadline, or before the
// first BEGIN. None of these is reported as exhausted retries.
func TestTxStopsWhenContextIsCanceled(t *testing.T) {
	t.Parallel()
	s, _ := txTestStore(t)

	t.Run("canceled during the backoff", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var attempts int
		err := s.Tx(ctx, sql.LevelSerializable, func(tx *sqlx.Tx) error {
			attempts++
			cancel()
			return serializationFailure()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrRetriesExhausted)
		require.Equal(t, 1, attempts)
	})

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
		defer cancel()
		var attempts int
		start := time.Now()
		err := s.Tx(ctx, sql.LevelSerializable, func(tx *sqlx.Tx) error {
			attempts++
			return serializationFailure()
		})
		require.Error(t, err)
		require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled), "%v", err)
		require.NotErrorIs(t, err, ErrRetriesExhausted)
		require.Less(t, attempts, maxTxAttempts)
		require.Less(t, time.Since(start), time.Second)
	})

	t.Run("canceled before BEGIN", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		err := s.Tx(ctx, sql.LevelSerializable, func(tx *sqlx.Tx) error {
			called = true
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, called)
	})
}

// Errors other than 40001/40P01 are returned at once, unretried, with their writes rolled
// back.
func TestTxDoesNotRetryOtherErrors(t *testing.T) {
	t.Parallel()
	s, obs := txTestStore(t)
	boom := errors.New("boom")
	for _, failure := range []error{
		boom,
		fmt.Errorf("wrapped: %w", errors.New("dag not found")),
		fmt.Errorf("insert: %w", &pq.Error{Code: "23505", Message: "duplicate key"}),
		fmt.Errorf("insert: %w", &pq.Error{Code: "57014", Message: "canceling statement due to statement timeout"}),
		fmt.Errorf("insert: %w", &pq.Error{Code: "40002", Message: "integrity constraint violation"}),
		context.Canceled,
	} {
		var attempts int
		err := s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error {
			attempts++
			if _, err := tx.Exec(`INSERT INTO tx_probe VALUES (1)`); err != nil {
				return err
			}
			return failure
		})
		require.ErrorIs(t, err, failure)
		require.NotErrorIs(t, err, ErrRetriesExhausted)
		require.Equal(t, 1, attempts, "%v", failure)
		require.Empty(t, probeRows(t, s), "%v: the write was rolled back", failure)
	}
	require.Zero(t, obs.retried.Load())
}

// An attempt that met a concurrent change (an error wrapping ErrTryAgain, as the creation's
// "a concurrent run took a slot's date") runs again like a serialization failure, and counts
// as a retry.
func TestTxRetriesAnAttemptThatAsksToTryAgain(t *testing.T) {
	t.Parallel()
	s, obs := txTestStore(t)
	var attempts int
	err := s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error {
		attempts++
		if _, err := tx.Exec(`INSERT INTO tx_probe VALUES ($1)`, attempts); err != nil {
			return err
		}
		if attempts < 3 {
			return fmt.Errorf("slot taken: %w", ErrTryAgain)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, attempts)
	require.Equal(t, []int{3}, probeRows(t, s), "the attempts that asked to try again were rolled back")
	require.EqualValues(t, 2, obs.retried.Load())
}

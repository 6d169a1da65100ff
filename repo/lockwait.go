package repo

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
)

// DefaultLockWait is how long a statement of a transaction waits for a row lock that another
// transaction holds before the transaction gives up (LOCK_WAIT).
const DefaultLockWait = 2 * time.Second

// lockWaitSQL sets lock_timeout for the current transaction only. SET LOCAL ends with the
// transaction, so a connection handed back to the pool (or to a transaction-mode pooler)
// carries nothing into the next one.
func lockWaitSQL(d time.Duration) string {
	return "SET LOCAL lock_timeout = " + lockWaitMillis(d)
}

// lockWaitMillis is d as lock_timeout takes it, in whole milliseconds (0 would mean no limit).
func lockWaitMillis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// statementLockWait is the condition with which a write made in one statement of its own,
// outside any transaction, bounds its lock waits by LOCK_WAIT as setLockWait bounds a
// transaction's, without the three round trips of BEGIN, SET LOCAL and COMMIT: set in the
// WHERE of the statement's row source, it is evaluated before the statement updates or locks
// a row, so it is in force when the statement waits for one, and set_config(..., true) lasts
// until the end of the statement's implicit transaction, so the session keeps nothing. param
// is the statement's parameter that carries Store.lockWaitMillis. Without it a PUT or PATCH
// of a row that another transaction held waited for as long as the holder liked, holding its
// connection and its admission slot (CI, 2026-12-04: a PUT of a DAG, 7 minutes).
func statementLockWait(param string) string {
	return "set_config('lock_timeout', " + param + ", true) IS NOT NULL"
}

// setLockWait bounds every lock wait of tx by LOCK_WAIT: an admitted request that meets a row
// held for seconds answers 503 busy after LOCK_WAIT, nothing written, instead of holding its
// connection and its admission slot for as long as the holder likes.
func (s *Store) setLockWait(ctx context.Context, tx *sqlx.Tx) error {
	if _, err := tx.ExecContext(ctx, s.lockWaitSQL); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	return nil
}

// leasePoolKey marks a context whose transactions run on the lease pool.
type leasePoolKey struct{}

// onLeasePool sends the transactions run under ctx to the lease pool (Config.LeaseDB), so
// that heartbeats, reports and releases never wait for a connection behind other work.
func onLeasePool(ctx context.Context) context.Context {
	return context.WithValue(ctx, leasePoolKey{}, true)
}

// txDB is the pool a transaction under ctx begins on.
func (s *Store) txDB(ctx context.Context) *sqlx.DB {
	if ctx.Value(leasePoolKey{}) != nil {
		return s.leaseDB
	}
	return s.db
}

package pgrun

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

// lockWaitSQL sets lock_timeout, in whole milliseconds, for the current transaction only.
// SET LOCAL ends with the transaction, so a connection handed back to the pool (or to a
// transaction-mode pooler) carries nothing into the next one.
func lockWaitSQL(millis string) string {
	return "SET LOCAL lock_timeout = " + millis
}

// lockWaitMillis is d as lock_timeout takes it, in whole milliseconds (0 would mean no limit).
func lockWaitMillis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// StatementLockWait is the condition with which a write made in one statement of its own,
// outside any transaction, bounds its lock waits as setLockWait bounds a transaction's,
// without the three round trips of BEGIN, SET LOCAL and COMMIT: set in the WHERE of the
// statement's row source, it is evaluated before the statement updates or locks a row, so it
// is in force when the statement waits for one, and set_config(..., true) lasts until the end
// of the statement's implicit transaction, so the session keeps nothing. param is the
// statement's parameter that carries the attempt's lockWait. Without it a PUT or PATCH of a
// row that another transaction holds waits for as long as the holder likes, holding its
// connection and its admission slot (minutes).
func StatementLockWait(param string) string {
	return "set_config('lock_timeout', " + param + ", true) IS NOT NULL"
}

// setLockWait bounds every lock wait of tx by the attempt's share of LOCK_WAIT: an admitted
// request that meets a row held for seconds answers 503 busy within LOCK_WAIT, nothing
// written, instead of holding its connection and its admission slot for as long as the
// holder likes.
func setLockWait(ctx context.Context, tx *sqlx.Tx, a Attempt) error {
	if _, err := tx.ExecContext(ctx, lockWaitSQL(a.LockWait)); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	return nil
}

// Attempt is what one attempt of an operation under Do is given.
type Attempt struct {
	// LockWait is the attempt's lock_timeout in milliseconds (lockBudget): a statement of its
	// own passes it to StatementLockWait's parameter.
	LockWait string
	// Ctx is the operation's context, with its span when tracing is on: a transaction begun
	// with it parents its statements' spans (session.BeginTx).
	Ctx context.Context
	// Pool is the pool the operation's context names (OnLeasePool), for a statement of its
	// own: the one way to reach it.
	Pool Queryer
}

// lockWaitFloor is the least share of LOCK_WAIT an attempt is sent with; below it the
// request answers ErrLockWait.
const lockWaitFloor = 10 * time.Millisecond

// A lockBudget shares LOCK_WAIT among the attempts of one statement or transaction, so that
// a statement's lock waits together last at most LOCK_WAIT. PostgreSQL's lock_timeout bounds
// each wait on its own, and a statement queued behind another waiter waits twice: for the
// tuple lock that waiter holds until it gives up, then for the holder's transaction (with
// LOCK_WAIT 2 s and a row held for 12 s, the second of eight PATCHes would answer after
// 3.9 s). So each attempt is given half of what is left, and one that
// times out is sent again, at once, with half of the rest, until less than lockWaitFloor
// would be given: a request behind one holder still waits about LOCK_WAIT in all, and one
// queued behind another waiter no longer waits twice that. (A timed-out attempt wrote
// nothing: its statement or transaction was rolled back.)
type lockBudget struct {
	deadline time.Time
}

func newLockBudget(lockWait time.Duration) lockBudget {
	return lockBudget{deadline: time.Now().Add(lockWait)}
}

// firstAttempt is the first attempt's share: half of LOCK_WAIT, however short LOCK_WAIT is.
// New formats it once, so that the reads and writes that never meet a held lock, nearly
// all of them, pay nothing but the budget's clock read for it.
func firstAttempt(lockWait time.Duration) Attempt {
	return Attempt{LockWait: lockWaitMillis(lockWait / 2)}
}

// next is the share of the attempt after one that timed out, or false when too little is
// left to try again.
func (b lockBudget) next() (Attempt, bool) {
	share := time.Until(b.deadline) / 2
	if share < lockWaitFloor {
		return Attempt{}, false
	}
	return Attempt{LockWait: lockWaitMillis(share)}, true
}

// leasePoolKey marks a context whose transactions run on the lease pool.
type leasePoolKey struct{}

// OnLeasePool sends the operations run under ctx (transactions, reads, statements, prepared
// statements) to the lease pool (Config.LeaseDB), so that heartbeats, reports and releases
// never wait for a connection behind other work.
func OnLeasePool(ctx context.Context) context.Context {
	return context.WithValue(ctx, leasePoolKey{}, true)
}

// pool is the pool an operation under ctx runs on.
func (d *DB) pool(ctx context.Context) *sqlx.DB {
	if ctx.Value(leasePoolKey{}) != nil {
		return d.leaseDB
	}
	return d.db
}

package pgrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// A lock budget gives the first attempt half of LOCK_WAIT, however short, and each attempt
// after a timeout half of what is left, until that is under lockWaitFloor: the attempts'
// waits add up to LOCK_WAIT at most, even when each of them waits twice.
func TestLockBudgetSharesLockWait(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1000", firstAttempt(2*time.Second).LockWait, "half of 2 s")
	require.Equal(t, "1", firstAttempt(time.Millisecond).LockWait, "lock_timeout 0 would mean no limit")

	b := lockBudget{deadline: time.Now().Add(400 * time.Millisecond)}
	a, ok := b.next()
	require.True(t, ok)
	ms, err := strconv.Atoi(a.LockWait)
	require.NoError(t, err)
	require.InDelta(t, 200, ms, 20)

	_, ok = lockBudget{deadline: time.Now().Add(2*lockWaitFloor - time.Millisecond)}.next()
	require.False(t, ok, "under the floor: answered, not tried again")
	_, ok = lockBudget{deadline: time.Now().Add(-time.Second)}.next()
	require.False(t, ok, "past the deadline")
}

// PostgreSQL reports a lock_timeout that fired as its lock was granted, followed by another
// wait in the same statement, as a cancel "due to user request": under a live context that is
// a lock wait, sent again with what is left of LOCK_WAIT and answered ErrLockWait, never a
// statement timeout. A statement timeout stays one.
func TestACancelNoTimeoutClaimsIsALockWait(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	s := New(db, Config{LockWait: 100 * time.Millisecond})
	byUser := &pq.Error{Code: "57014", Message: "canceling statement due to user request"}
	var attempts int
	err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		return fmt.Errorf("update runs: %w", byUser)
	})
	require.ErrorIs(t, err, ErrLockWait)
	require.False(t, IsStatementTimeout(err) && !errors.Is(err, ErrLockWait))
	require.Greater(t, attempts, 1, "sent again with what is left of LOCK_WAIT")

	attempts = 0
	timeout := &pq.Error{Code: "57014", Message: "canceling statement due to statement timeout"}
	err = s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		return fmt.Errorf("update runs: %w", timeout)
	})
	require.ErrorIs(t, err, ErrStatementTimeout)
	require.NotErrorIs(t, err, ErrLockWait)
	require.Equal(t, 1, attempts)
}

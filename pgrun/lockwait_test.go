package pgrun

import (
	"strconv"
	"testing"
	"time"

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

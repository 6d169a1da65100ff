package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBackfillStatesPartition(t *testing.T) {
	all := []BackfillState{BackfillRunning, BackfillPaused, BackfillCanceling, BackfillSucceeded, BackfillFailed, BackfillCanceled}
	for _, s := range all {
		require.NotEqual(t, s.Active(), s.Terminal(), "%s is exactly one of active and terminal", s)
	}
	require.Len(t, append(append([]BackfillState{}, ActiveBackfillStates...), TerminalBackfillStates...), len(all))
	require.False(t, BackfillState("nonsense").Active())
	require.False(t, BackfillState("nonsense").Terminal())
}

func TestRunStateInFlight(t *testing.T) {
	for s, want := range map[RunState]bool{
		RunQueued: true, RunRunning: true, RunSuccess: false, RunFailed: false, RunCanceled: false,
	} {
		require.Equal(t, want, s.InFlight(), string(s))
	}
}

package client

// BackfillStates are every state of a backfill in the order of its life: the active ones
// (running, paused, canceling), then the terminal ones. Tools list them (a flag's allowed
// values) from here rather than typing the enum again.
func BackfillStates() []BackfillState {
	return []BackfillState{BackfillStateRunning, BackfillStatePaused, BackfillStateCanceling,
		BackfillStateSucceeded, BackfillStateFailed, BackfillStateCanceled}
}

// DagRunStates are every state of a run in the order of its life: queued, running, then the
// terminal ones.
func DagRunStates() []DagRunState {
	return []DagRunState{DagRunStateQueued, DagRunStateRunning, DagRunStateSuccess, DagRunStateFailed, DagRunStateCanceled}
}

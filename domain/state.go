// Package domain holds the rules of backfills that need no database: the states and which of
// them are active, how a request becomes planned slots, how a slot whose date already has a
// run is decided, and the digests that make creation idempotent and bindable to a preview.
// repo runs the SQL and calls into this package; nothing here does I/O, so each rule has
// unit tests of its own.
package domain

import "slices"

// BackfillState is a backfill's state, as the backfills_state_valid constraint lists them.
type BackfillState string

// Backfill states. Active ones hold the DAG's single active slot.
const (
	BackfillRunning   BackfillState = "running"
	BackfillPaused    BackfillState = "paused"
	BackfillCanceling BackfillState = "canceling"
	BackfillSucceeded BackfillState = "succeeded"
	BackfillFailed    BackfillState = "failed"
	BackfillCanceled  BackfillState = "canceled"
)

// ActiveBackfillStates are the states in which a backfill holds its DAG's one active slot.
// The schema's partial indexes (backfills_one_active_per_dag, backfills_active_by_id) say
// the same; repo's tests compare the two, and repo builds every SQL predicate on active
// backfills from this list. Do not change the slice.
var ActiveBackfillStates = []BackfillState{BackfillRunning, BackfillPaused, BackfillCanceling}

// TerminalBackfillStates are the states a backfill never leaves.
var TerminalBackfillStates = []BackfillState{BackfillSucceeded, BackfillFailed, BackfillCanceled}

// Active reports whether a backfill in this state holds its DAG's active slot.
func (s BackfillState) Active() bool { return slices.Contains(ActiveBackfillStates, s) }

// Terminal reports whether a backfill in this state is finished for good.
func (s BackfillState) Terminal() bool { return slices.Contains(TerminalBackfillStates, s) }

// RunState is a DAG run's state, as the dag_runs_state_valid constraint lists them.
type RunState string

// Run states.
const (
	RunQueued   RunState = "queued"
	RunRunning  RunState = "running"
	RunSuccess  RunState = "success"
	RunFailed   RunState = "failed"
	RunCanceled RunState = "canceled"
	// RunDeferred is a report's word, never a run's state: the run's system asked for it to
	// be tried later, so it goes back to queued, not claimable until a given time.
	RunDeferred RunState = "deferred"
)

// MaxDeferSeconds bounds a deferral's retry_after_seconds (a day).
const MaxDeferSeconds = 86400

// InFlight reports whether a run in this state is waiting for or held by a worker.
func (s RunState) InFlight() bool { return s == RunQueued || s == RunRunning }

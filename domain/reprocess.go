package domain

import "time"

// ReprocessBehavior says which existing runs a backfill takes over, as the request's
// reprocess_behavior and the backfills column name them.
type ReprocessBehavior string

// Reprocess behaviours.
const (
	ReprocessNone      ReprocessBehavior = "none"
	ReprocessFailed    ReprocessBehavior = "failed"
	ReprocessCompleted ReprocessBehavior = "completed"
)

// ExistingRun is a run that already holds a slot's logical date.
type ExistingRun struct {
	ID          int64
	LogicalDate time.Time
	State       RunState
}

// DecideExisting decides every slot whose date has a run in runs (the runs of the DAG in the
// plan's Window): reprocess it or skip it with a reason. Slots without a run stay as they are.
func DecideExisting(slots []PlannedSlot, behavior ReprocessBehavior, runs []ExistingRun) {
	if len(runs) == 0 {
		return
	}
	// Dates compare by instant at PostgreSQL's precision, whatever their location.
	byDate := make(map[int64]ExistingRun, len(runs))
	for _, r := range runs {
		byDate[r.LogicalDate.UnixMicro()] = r
	}
	for i := range slots {
		if r, ok := byDate[slots[i].LogicalDate.UnixMicro()]; ok {
			Decide(&slots[i], behavior, r.ID, r.State)
		}
	}
}

// Decide settles a slot whose date already has a run (runID, in state): reprocess it or skip
// it with a reason.
func Decide(slot *PlannedSlot, behavior ReprocessBehavior, runID int64, state RunState) {
	if reason, skip := SkipReason(behavior, state); skip {
		slot.Action = ActionSkip
		slot.ExceptionReason = &reason
		return
	}
	slot.Action = ActionReprocess
	slot.ExistingRunID = runID
}

// SkipReason applies the contract's reprocess rules to a run that exists for a slot: a run in
// flight is never taken over; "completed" takes over any finished run, "failed" a failed or
// canceled one, "none" nothing.
func SkipReason(behavior ReprocessBehavior, state RunState) (string, bool) {
	switch {
	case state.InFlight():
		return ReasonInFlight, true
	case behavior == ReprocessCompleted:
		return "", false
	case behavior == ReprocessFailed && (state == RunFailed || state == RunCanceled):
		return "", false
	default:
		return ReasonAlreadyExists, true
	}
}

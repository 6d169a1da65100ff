package domain

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/backfillsvc/backfill/schedule"
)

// Errors of planning. repo returns them as they are (it declares no copies); handlers map
// them to 422.
var (
	// ErrInvalidDag means the schedule or timezone cannot be used.
	ErrInvalidDag = errors.New("invalid dag")
	// ErrInvalidBackfill means the window cannot be planned (from after to, or in the future).
	ErrInvalidBackfill = errors.New("invalid backfill")
	// ErrTooManyRuns means the window has more slots than one backfill may have.
	ErrTooManyRuns = errors.New("too many runs")
)

// BackfillRequest describes a backfill to create. Defaults are filled in by the caller.
//
// RequestHash hashes the whole struct, so a field added here is part of the idempotency
// fingerprint by default; the field names and their order are part of that hash (stored
// under idempotency keys), so rename or reorder nothing without a reason.
type BackfillRequest struct {
	DagID        string
	FromDate     time.Time
	ToDate       time.Time
	RunBackwards bool
	// DagRunConf is the client's JSON (nil for none), kept as sent: see RequestHash.
	DagRunConf        []byte
	ReprocessBehavior ReprocessBehavior
	MaxActiveRuns     int
	Description       *string
	// IdempotencyKey is "" when the request carries none.
	IdempotencyKey string
	// MaxFailedRuns is the failure budget; nil for none.
	MaxFailedRuns *int
	// IfMatch binds the creation to a plan: nil checks nothing, otherwise the settled plan's
	// digest must be one of these.
	IfMatch []string
	// Dates, when not nil, are the slots' logical dates in sort order, instead of the
	// schedule's ticks in the window (a retry's slots).
	Dates []time.Time
	// ParentBackfillID is the backfill a retry is made from.
	ParentBackfillID *int64
	// Pool is the pool the backfill's runs are claimed in; nil for none. omitempty keeps the
	// request hash of a request without a pool what it was before pools existed.
	Pool *string `json:",omitempty"`
	// CodeRef is the code the runs are to run (an image digest, a git SHA); nil for none.
	// Like Pool, it and the fields below are left out of the request hash when unset.
	CodeRef *string `json:",omitempty"`
	// CreatedBy is the principal that asks (see handlers' actor); nil when unknown.
	CreatedBy *string `json:",omitempty"`
	// Reason says why; nil for none.
	Reason *string `json:",omitempty"`
	// LogicalDates, when not nil, are the client's chosen slots of the window, instead of all
	// of them: each must be a slot (slotsForLogicalDates).
	LogicalDates []time.Time `json:",omitempty"`
	// Priority orders claims between backfills (MinPriority..MaxPriority); 0, the default, is
	// left out of the request hash.
	Priority int `json:",omitempty"`
	// GroupID and GroupDepth make the backfill a member of a group, at its depth in the
	// group's graph (set by the group's creation, never by a client).
	GroupID    *int64 `json:",omitempty"`
	GroupDepth int    `json:",omitempty"`
}

// SlotAction is what creation does with one slot.
type SlotAction string

// Slot actions, as a dry run answers them.
const (
	ActionCreate    SlotAction = "create"
	ActionReprocess SlotAction = "reprocess"
	ActionSkip      SlotAction = "skip"
)

// Skip reasons, stored in backfill_dag_runs.exception_reason.
const (
	ReasonInFlight      = "in flight"
	ReasonAlreadyExists = "already exists"
)

// PlannedSlot is what creation would do with one slot.
type PlannedSlot struct {
	SortOrdinal     int
	LogicalDate     time.Time
	IntervalEnd     time.Time
	Action          SlotAction
	ExceptionReason *string
	// ExistingRunID is the run a reprocess takes over.
	ExistingRunID int64
	// BlockedBy is how many runs the slot's run waits for when it is written (a group
	// member's: its runs of the members upstream, domain.WaitsOnUpstreams); 0 otherwise.
	BlockedBy int
}

// ValidateSchedule answers ErrInvalidDag when a DAG's schedule or timezone cannot be planned.
func ValidateSchedule(scheduleExpr, timezone string) error {
	_, err := parseSchedule(scheduleExpr, timezone)
	return err
}

func parseSchedule(scheduleExpr, timezone string) (*schedule.Schedule, error) {
	sched, err := schedule.Parse(scheduleExpr, timezone)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDag, err)
	}
	return sched, nil
}

// PlanSlots validates a request against its DAG's schedule and timezone and lists its slots
// in sort order, all to be created: existing runs are decided afterwards (DecideExisting).
// now is the database's clock, so that replicas agree on which ticks have ended; maxRuns
// caps the slots.
func PlanSlots(scheduleExpr, timezone string, req BackfillRequest, now time.Time, maxRuns int) ([]PlannedSlot, error) {
	sched, err := parseSchedule(scheduleExpr, timezone)
	if err != nil {
		return nil, err
	}
	if req.Dates != nil {
		return slotsForDates(sched, req.Dates), nil
	}
	if req.FromDate.After(req.ToDate) {
		return nil, fmt.Errorf("%w: from_date is after to_date", ErrInvalidBackfill)
	}
	if req.FromDate.After(now) {
		return nil, fmt.Errorf("%w: from_date and to_date are both in the future", ErrInvalidBackfill)
	}
	if req.LogicalDates != nil {
		slots, err := slotsForLogicalDates(sched, req, now)
		if err == nil && len(slots) > maxRuns {
			return nil, &TooManyRunsError{Slots: len(slots), Exact: true, MaxRuns: maxRuns}
		}
		return slots, err
	}
	ticks, err := sched.Slots(req.FromDate, req.ToDate, now, maxRuns)
	if tm := (*schedule.TooManySlotsError)(nil); errors.As(err, &tm) {
		return nil, &TooManyRunsError{Slots: tm.Count, Exact: tm.Exact, MaxRuns: maxRuns}
	}
	if err != nil {
		return nil, fmt.Errorf("compute slots: %w", err)
	}
	if req.RunBackwards {
		slices.Reverse(ticks)
	}
	slots := make([]PlannedSlot, len(ticks))
	for i, t := range ticks {
		slots[i] = PlannedSlot{SortOrdinal: i + 1, LogicalDate: t.LogicalDate, IntervalEnd: t.IntervalEnd, Action: ActionCreate}
	}
	return slots, nil
}

// slotsForDates lists explicit slot dates (a retry's) as slots in the given order.
func slotsForDates(sched *schedule.Schedule, dates []time.Time) []PlannedSlot {
	slots := make([]PlannedSlot, len(dates))
	for i, d := range dates {
		d = d.UTC()
		slots[i] = PlannedSlot{SortOrdinal: i + 1, LogicalDate: d, IntervalEnd: sched.Next(d), Action: ActionCreate}
	}
	return slots
}

// Window is the first and last logical date of slots, in either order of the plan: the
// range of dates whose existing runs decide them.
func Window(slots []PlannedSlot) (time.Time, time.Time) {
	first, last := slots[0].LogicalDate, slots[len(slots)-1].LogicalDate
	if first.After(last) {
		first, last = last, first
	}
	return first, last
}

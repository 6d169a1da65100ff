package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/schedule"
)

// MaxLogicalDates bounds a request's logical_dates.
const MaxLogicalDates = 10000

// maxNamedDates is how many offending dates an InvalidLogicalDatesError names.
const maxNamedDates = 10

// ErrInvalidLogicalDates means a chosen logical date is not a slot of the window.
var ErrInvalidLogicalDates = errors.New("invalid logical_dates")

// InvalidLogicalDatesError names the first chosen dates that are not slots, and how many are not.
type InvalidLogicalDatesError struct {
	Dates []time.Time
	Count int
}

func (e *InvalidLogicalDatesError) Error() string {
	names := make([]string, len(e.Dates))
	for i, d := range e.Dates {
		names[i] = d.UTC().Format(time.RFC3339Nano)
	}
	more := ""
	if e.Count > len(e.Dates) {
		more = fmt.Sprintf(" and %d more", e.Count-len(e.Dates))
	}
	return fmt.Sprintf("%d of logical_dates are not slots of the DAG's schedule in the window whose interval has ended: %s%s",
		e.Count, strings.Join(names, ", "), more)
}

// Is lets callers match with errors.Is(err, ErrInvalidLogicalDates).
func (e *InvalidLogicalDatesError) Is(target error) bool { return target == ErrInvalidLogicalDates }

// slotsForLogicalDates lists the chosen dates as slots, in the window's sort order, after
// checking that each is one of the window's slots: a tick of the schedule from from to to
// whose interval has ended. Each date is checked on its own (the schedule's next tick), so
// choosing a few dates of a window too large for one backfill costs a few ticks, not the
// window. A date given twice is one slot.
func slotsForLogicalDates(sched *schedule.Schedule, req BackfillRequest, now time.Time) ([]PlannedSlot, error) {
	seen := make(map[int64]bool, len(req.LogicalDates))
	slots := make([]PlannedSlot, 0, len(req.LogicalDates))
	bad := &InvalidLogicalDatesError{}
	for _, d := range req.LogicalDates {
		d = d.UTC()
		if seen[d.UnixMicro()] {
			continue
		}
		seen[d.UnixMicro()] = true
		end := sched.Next(d)
		if d.Before(req.FromDate) || d.After(req.ToDate) || !sched.IsTick(d) || end.IsZero() || end.After(now) {
			bad.Count++
			if len(bad.Dates) < maxNamedDates {
				bad.Dates = append(bad.Dates, d)
			}
			continue
		}
		slots = append(slots, PlannedSlot{LogicalDate: d, IntervalEnd: end, Action: ActionCreate})
	}
	if bad.Count > 0 {
		return nil, bad
	}
	slices.SortFunc(slots, func(a, b PlannedSlot) int { return a.LogicalDate.Compare(b.LogicalDate) })
	if req.RunBackwards {
		slices.Reverse(slots)
	}
	for i := range slots {
		slots[i].SortOrdinal = i + 1
	}
	return slots, nil
}

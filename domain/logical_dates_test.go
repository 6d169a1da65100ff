package domain

import (
	"errors"
	"testing"
	"time"
)

func TestPlanSlotsOfLogicalDates(t *testing.T) {
	h := func(d, hour int) time.Time { return time.Date(2024, 3, d, hour, 0, 0, 0, time.UTC) }
	now := h(10, 0)
	req := BackfillRequest{FromDate: h(1, 0), ToDate: h(9, 0), RunBackwards: true,
		LogicalDates: []time.Time{h(2, 5), h(1, 3), h(2, 5)}}
	slots, err := PlanSlots("@hourly", "UTC", req, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 2 || !slots[0].LogicalDate.Equal(h(2, 5)) || slots[0].SortOrdinal != 1 ||
		!slots[1].IntervalEnd.Equal(h(1, 4)) || slots[1].SortOrdinal != 2 {
		t.Fatalf("slots = %+v", slots)
	}

	// Not ticks, outside the window, or not ended: each named, the first ten of them.
	req.LogicalDates = []time.Time{h(2, 5).Add(30 * time.Minute), h(9, 1), h(1, 2).Add(time.Millisecond)}
	_, err = PlanSlots("@hourly", "UTC", req, now, 100)
	var bad *InvalidLogicalDatesError
	if !errors.As(err, &bad) || !errors.Is(err, ErrInvalidLogicalDates) || bad.Count != 3 || len(bad.Dates) != 3 {
		t.Fatalf("err = %v", err)
	}
	req.ToDate = h(12, 0)
	req.LogicalDates = []time.Time{h(9, 23)} // its interval ends at now: a slot
	if _, err := PlanSlots("@hourly", "UTC", req, now, 100); err != nil {
		t.Fatal(err)
	}
	req.LogicalDates = []time.Time{h(10, 0)} // its interval has not ended
	if _, err := PlanSlots("@hourly", "UTC", req, now, 100); !errors.Is(err, ErrInvalidLogicalDates) {
		t.Fatalf("err = %v", err)
	}

	// MAX_BACKFILL_RUNS caps chosen slots too.
	req.LogicalDates = []time.Time{h(1, 1), h(1, 2), h(1, 3)}
	if _, err := PlanSlots("@hourly", "UTC", req, now, 2); !errors.Is(err, ErrTooManyRuns) {
		t.Fatalf("err = %v", err)
	}
}

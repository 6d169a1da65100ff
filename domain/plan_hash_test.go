package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func planOf(t *testing.T) []PlannedSlot {
	t.Helper()
	slots, err := PlanSlots("@daily", "UTC", BackfillRequest{FromDate: day(1), ToDate: day(3)}, day(10), 10)
	require.NoError(t, err)
	return slots
}

// A digest handed to clients must not change between releases: a dry run's hash sent back in
// If-Match after an upgrade must still bind. The value was computed by the code before it
// moved to this package.
func TestPlanHashIsStable(t *testing.T) {
	require.Equal(t, "94f028f96ea679c790314d7618e8da75dfc603cb892fcf7274ec0bdad52e37e7", PlanHash("@daily", "UTC", planOf(t)))
}

// Each part of a plan moves its digest; a field boundary cannot be shifted to spell the same
// bytes.
func TestPlanHashSeesEveryPart(t *testing.T) {
	base := PlanHash("@daily", "UTC", planOf(t))
	reason := ReasonInFlight
	otherReason := ReasonAlreadyExists
	for _, tc := range []struct {
		name   string
		sched  string
		tz     string
		change func([]PlannedSlot) []PlannedSlot
	}{
		{"schedule", "0 0 * * *", "UTC", nil},
		{"timezone", "@daily", "Etc/UTC", nil},
		{"schedule and timezone boundary", "@dailyU", "TC", nil},
		{"a slot's date", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot { s[1].LogicalDate = day(5); return s }},
		{"a slot's action", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot { s[1].Action = ActionReprocess; return s }},
		{"a skip reason", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot {
			s[1].Action, s[1].ExceptionReason = ActionSkip, &reason
			return s
		}},
		{"which skip reason", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot {
			s[1].Action, s[1].ExceptionReason = ActionSkip, &otherReason
			return s
		}},
		{"the order", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot { s[0], s[2] = s[2], s[0]; return s }},
		{"one slot fewer", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot { return s[:2] }},
		{"no slots", "@daily", "UTC", func(s []PlannedSlot) []PlannedSlot { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots := planOf(t)
			if tc.change != nil {
				slots = tc.change(slots)
			}
			require.NotEqual(t, base, PlanHash(tc.sched, tc.tz, slots))
		})
	}
	// What a plan does not contain does not move it: the run taken over, the interval end,
	// and the zone a date is spelled in.
	slots := planOf(t)
	slots[0].ExistingRunID = 9
	slots[1].IntervalEnd = day(20)
	slots[2].LogicalDate = slots[2].LogicalDate.In(time.FixedZone("plus2", 2*60*60))
	require.Equal(t, base, PlanHash("@daily", "UTC", slots))
}

func TestCheckPlan(t *testing.T) {
	slots := planOf(t)
	sum := PlanHash("@daily", "UTC", slots)
	for _, tc := range []struct {
		name    string
		ifMatch []string
		changed bool
	}{
		{"no precondition", nil, false},
		{"matches", []string{sum}, false},
		{"matches one of several", []string{"other", sum}, false},
		{"matches none", []string{"other"}, true},
		{"an empty list binds to no plan", []string{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckPlan("@daily", "UTC", slots, tc.ifMatch)
			if !tc.changed {
				require.NoError(t, err)
				require.Equal(t, sum, got)
				return
			}
			require.ErrorIs(t, err, ErrPlanChanged)
			var pc *PlanChangedError
			require.ErrorAs(t, err, &pc)
			require.Equal(t, sum, pc.CurrentPlanHash, "the error carries the plan as it is now")
			require.Empty(t, got)
		})
	}
}

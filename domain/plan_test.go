package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func day(d int) time.Time { return time.Date(2024, 1, d, 0, 0, 0, 0, time.UTC) }

func TestPlanSlots(t *testing.T) {
	now := day(10)
	window := func(from, to int) BackfillRequest { return BackfillRequest{FromDate: day(from), ToDate: day(to)} }
	for _, tc := range []struct {
		name     string
		sched    string
		timezone string
		req      BackfillRequest
		max      int
		wantErr  error
		// want is each slot's logical day of January, in sort order.
		want []int
	}{
		{name: "daily window, both ends included", sched: "@daily", req: window(1, 3), want: []int{1, 2, 3}},
		{name: "backwards reverses the sort order", sched: "@daily",
			req: BackfillRequest{FromDate: day(1), ToDate: day(3), RunBackwards: true}, want: []int{3, 2, 1}},
		{name: "only ticks whose interval has ended", sched: "@daily", req: window(8, 20), want: []int{8, 9}},
		{name: "a window with no ended tick plans nothing", sched: "@daily",
			req: BackfillRequest{FromDate: day(9).Add(time.Hour), ToDate: day(9).Add(2 * time.Hour)}, want: []int{}},
		{name: "exactly the cap is allowed", sched: "@daily", req: window(1, 3), max: 3, want: []int{1, 2, 3}},
		{name: "over the cap", sched: "@daily", req: window(1, 3), max: 2, wantErr: ErrTooManyRuns},
		{name: "from after to", sched: "@daily", req: window(3, 1), wantErr: ErrInvalidBackfill},
		{name: "window in the future", sched: "@daily", req: window(11, 12), wantErr: ErrInvalidBackfill},
		{name: "bad schedule", sched: "not a schedule", req: window(1, 3), wantErr: ErrInvalidDag},
		{name: "bad timezone", sched: "@daily", timezone: "Mars/Olympus", req: window(1, 3), wantErr: ErrInvalidDag},
		{name: "explicit dates keep their order and skip the window checks", sched: "@daily",
			req: BackfillRequest{FromDate: day(30), ToDate: day(1), Dates: []time.Time{day(5), day(2)}}, want: []int{5, 2}},
		{name: "explicit dates are checked against the schedule too", sched: "bad",
			req: BackfillRequest{Dates: []time.Time{day(5)}}, wantErr: ErrInvalidDag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tz := tc.timezone
			if tz == "" {
				tz = "UTC"
			}
			max := tc.max
			if max == 0 {
				max = 1000
			}
			slots, err := PlanSlots(tc.sched, tz, tc.req, now, max)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, slots)
				return
			}
			require.NoError(t, err)
			got := make([]int, len(slots))
			for i, sl := range slots {
				got[i] = sl.LogicalDate.Day()
				require.Equal(t, i+1, sl.SortOrdinal, "ordinals are 1..N in sort order")
				require.Equal(t, ActionCreate, sl.Action)
				require.Nil(t, sl.ExceptionReason)
				require.Equal(t, sl.LogicalDate.Add(24*time.Hour), sl.IntervalEnd, "a daily slot's interval is one day")
				require.Equal(t, time.UTC, sl.LogicalDate.Location())
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// Explicit dates sent in another zone are planned in UTC: the same instant, one spelling.
func TestPlanSlotsExplicitDatesInUTC(t *testing.T) {
	zone := time.FixedZone("plus2", 2*60*60)
	slots, err := PlanSlots("@daily", "UTC", BackfillRequest{Dates: []time.Time{day(5).In(zone)}}, day(10), 10)
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, time.UTC, slots[0].LogicalDate.Location())
	require.True(t, slots[0].LogicalDate.Equal(day(5)))
	require.Equal(t, day(6), slots[0].IntervalEnd)
}

// A timezone moves the ticks of a daily schedule to local midnight.
func TestPlanSlotsInTimezone(t *testing.T) {
	slots, err := PlanSlots("@daily", "Europe/Paris", BackfillRequest{FromDate: day(1), ToDate: day(3)}, day(10), 10)
	require.NoError(t, err)
	require.Len(t, slots, 2)
	require.Equal(t, time.Date(2024, 1, 1, 23, 0, 0, 0, time.UTC), slots[0].LogicalDate)
	require.Equal(t, time.Date(2024, 1, 2, 23, 0, 0, 0, time.UTC), slots[1].LogicalDate)
}

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		days        []int
		first, last int
	}{
		{"one slot", []int{4}, 4, 4},
		{"forwards", []int{1, 2, 3}, 1, 3},
		{"backwards", []int{3, 2, 1}, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots := make([]PlannedSlot, len(tc.days))
			for i, d := range tc.days {
				slots[i].LogicalDate = day(d)
			}
			first, last := Window(slots)
			require.Equal(t, day(tc.first), first)
			require.Equal(t, day(tc.last), last)
		})
	}
}

func TestValidateSchedule(t *testing.T) {
	for _, tc := range []struct {
		sched, tz string
		ok        bool
	}{
		{"@daily", "UTC", true},
		{"*/5 * * * *", "America/New_York", true},
		{"not a schedule", "UTC", false},
		{"@daily", "Mars/Olympus", false},
	} {
		err := ValidateSchedule(tc.sched, tc.tz)
		if tc.ok {
			require.NoError(t, err, "%s in %s", tc.sched, tc.tz)
		} else {
			require.ErrorIs(t, err, ErrInvalidDag, "%s in %s", tc.sched, tc.tz)
		}
	}
}

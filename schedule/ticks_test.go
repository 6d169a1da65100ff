package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTicks(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		from, to       string
		want           []string
	}{
		{
			name: "hourly through spring forward: 00:00 EST, 01:00 EST, 03:00 EDT, 04:00 EDT",
			expr: "0 * * * *", tz: "America/New_York",
			from: "2024-03-10T04:30:00Z", to: "2024-03-10T08:30:00Z",
			want: []string{"2024-03-10T05:00:00Z", "2024-03-10T06:00:00Z", "2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z"},
		},
		{
			name: "hourly through fall back: 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST",
			expr: "@hourly", tz: "America/New_York",
			from: "2024-11-03T03:30:00Z", to: "2024-11-03T07:30:00Z",
			want: []string{"2024-11-03T04:00:00Z", "2024-11-03T05:00:00Z", "2024-11-03T06:00:00Z", "2024-11-03T07:00:00Z"},
		},
		{
			name: "hourly at half past skips the missing hour",
			expr: "30 */1 * * *", tz: "America/New_York",
			from: "2024-03-10T06:00:00Z", to: "2024-03-10T08:00:00Z",
			want: []string{"2024-03-10T06:30:00Z", "2024-03-10T07:30:00Z"},
		},
		{
			name: "daily local midnight across spring forward",
			expr: "@daily", tz: "America/New_York",
			from: "2024-03-08T00:00:00Z", to: "2024-03-12T00:00:00Z",
			want: []string{"2024-03-08T05:00:00Z", "2024-03-09T05:00:00Z", "2024-03-10T05:00:00Z", "2024-03-11T04:00:00Z"},
		},
		{
			name: "0 0 * * * equals @daily",
			expr: "0 0 * * *", tz: "America/New_York",
			from: "2024-03-08T00:00:00Z", to: "2024-03-12T00:00:00Z",
			want: []string{"2024-03-08T05:00:00Z", "2024-03-09T05:00:00Z", "2024-03-10T05:00:00Z", "2024-03-11T04:00:00Z"},
		},
		{
			name: "02:30 does not exist on spring forward day: 03:30 EDT",
			expr: "30 2 * * *", tz: "America/New_York",
			from: "2024-03-09T00:00:00Z", to: "2024-03-11T23:00:00Z",
			want: []string{"2024-03-09T07:30:00Z", "2024-03-10T07:30:00Z", "2024-03-11T06:30:00Z"},
		},
		{
			name: "01:30 occurs twice on fall back day: first (EDT) only",
			expr: "30 1 * * *", tz: "America/New_York",
			from: "2024-11-02T00:00:00Z", to: "2024-11-04T23:00:00Z",
			want: []string{"2024-11-02T05:30:00Z", "2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"},
		},
		{
			name: "02:00 shifts onto 03:00: one tick",
			expr: "0 2,3 * * *", tz: "America/New_York",
			from: "2024-03-09T00:00:00Z", to: "2024-03-11T23:00:00Z",
			want: []string{
				"2024-03-09T07:00:00Z", "2024-03-09T08:00:00Z",
				"2024-03-10T07:00:00Z",
				"2024-03-11T06:00:00Z", "2024-03-11T07:00:00Z",
			},
		},
		{
			name: "shifted gap times interleave with real ones in order",
			expr: "0,45 2,3 * * *", tz: "America/New_York",
			from: "2024-03-10T00:00:00Z", to: "2024-03-10T23:00:00Z",
			want: []string{"2024-03-10T07:00:00Z", "2024-03-10T07:45:00Z"},
		},
		{
			name: "every minute of the repeated hour ticks once",
			expr: "* 1 * * *", tz: "America/New_York",
			from: "2024-11-03T05:58:00Z", to: "2024-11-03T07:05:00Z",
			want: []string{"2024-11-03T05:58:00Z", "2024-11-03T05:59:00Z"},
		},
		{
			name: "every 6 hours is a fixed-time schedule",
			expr: "0 */6 * * *", tz: "America/New_York",
			from: "2024-11-03T00:00:00Z", to: "2024-11-04T00:00:00Z",
			want: []string{"2024-11-03T04:00:00Z", "2024-11-03T11:00:00Z", "2024-11-03T17:00:00Z", "2024-11-03T23:00:00Z"},
		},
		{
			name: "London spring forward: 01:30 GMT does not exist, 02:30 BST",
			expr: "30 1 * * *", tz: "Europe/London",
			from: "2024-03-30T00:00:00Z", to: "2024-04-01T00:00:00Z",
			want: []string{"2024-03-30T01:30:00Z", "2024-03-31T01:30:00Z"},
		},
		{
			name: "London fall back: 01:30 BST first",
			expr: "30 1 * * *", tz: "Europe/London",
			from: "2024-10-26T00:00:00Z", to: "2024-10-28T23:00:00Z",
			want: []string{"2024-10-26T00:30:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"},
		},
		{
			name: "Lord Howe half-hour spring forward: 02:15 +10:30 does not exist, 02:45 +11",
			expr: "15 2 * * *", tz: "Australia/Lord_Howe",
			from: "2024-10-04T00:00:00Z", to: "2024-10-06T12:00:00Z",
			want: []string{"2024-10-04T15:45:00Z", "2024-10-05T15:45:00Z"},
		},
		{
			name: "Lord Howe half-hour fall back: 01:45 +11 first",
			expr: "45 1 * * *", tz: "Australia/Lord_Howe",
			from: "2024-04-05T00:00:00Z", to: "2024-04-07T23:00:00Z",
			want: []string{"2024-04-05T14:45:00Z", "2024-04-06T14:45:00Z", "2024-04-07T15:15:00Z"},
		},
		{
			name: "Kolkata +05:30",
			expr: "30 5 * * *", tz: "Asia/Kolkata",
			from: "2024-06-01T00:00:00Z", to: "2024-06-02T00:00:00Z",
			want: []string{"2024-06-01T00:00:00Z", "2024-06-02T00:00:00Z"},
		},
		{
			name: "Samoa skipped 2011-12-30: its midnight is the next midnight, once",
			expr: "@daily", tz: "Pacific/Apia",
			from: "2011-12-28T00:00:00Z", to: "2012-01-01T00:00:00Z",
			want: []string{"2011-12-28T10:00:00Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
		},
		{
			name: "day of month OR day of week",
			expr: "0 0 1 * 1", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-02-29T00:00:00Z",
			want: []string{
				"2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z", "2024-01-15T00:00:00Z", "2024-01-22T00:00:00Z",
				"2024-01-29T00:00:00Z", "2024-02-01T00:00:00Z", "2024-02-05T00:00:00Z", "2024-02-12T00:00:00Z",
				"2024-02-19T00:00:00Z", "2024-02-26T00:00:00Z",
			},
		},
		{
			name: "day of month with star weekday is AND",
			expr: "0 0 1 * *", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-03-31T00:00:00Z",
			want: []string{"2024-01-01T00:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		},
		{
			name: "weekday with star day of month",
			expr: "0 0 * * MON", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-01-31T00:00:00Z",
			want: []string{"2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z", "2024-01-15T00:00:00Z", "2024-01-22T00:00:00Z", "2024-01-29T00:00:00Z"},
		},
		{
			name: "weekday names, lower case",
			expr: "0 12 * * sat,SUN", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-01-15T00:00:00Z",
			want: []string{"2024-01-06T12:00:00Z", "2024-01-07T12:00:00Z", "2024-01-13T12:00:00Z", "2024-01-14T12:00:00Z"},
		},
		{
			name: "minute steps",
			expr: "*/15 * * * *", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-01-01T01:00:00Z",
			want: []string{"2024-01-01T00:00:00Z", "2024-01-01T00:15:00Z", "2024-01-01T00:30:00Z", "2024-01-01T00:45:00Z", "2024-01-01T01:00:00Z"},
		},
		{
			name: "range with step",
			expr: "5-20/5 3 * * *", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-01-01T23:00:00Z",
			want: []string{"2024-01-01T03:05:00Z", "2024-01-01T03:10:00Z", "2024-01-01T03:15:00Z", "2024-01-01T03:20:00Z"},
		},
		{
			name: "month names",
			expr: "0 0 1 JAN,jul *", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2025-12-31T00:00:00Z",
			want: []string{"2024-01-01T00:00:00Z", "2024-07-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-07-01T00:00:00Z"},
		},
		{
			name: "leap day under the AND rule: 8 years apart across 2100",
			expr: "0 0 29 2 *", tz: "UTC",
			from: "2096-01-01T00:00:00Z", to: "2104-12-31T00:00:00Z",
			want: []string{"2096-02-29T00:00:00Z", "2104-02-29T00:00:00Z"},
		},
		{
			name: "weekly and yearly presets",
			expr: "@weekly", tz: "UTC",
			from: "2024-01-01T00:00:00Z", to: "2024-01-15T00:00:00Z",
			want: []string{"2024-01-07T00:00:00Z", "2024-01-14T00:00:00Z"},
		},
		{
			name: "New York DST far in the future (zone extend rule)",
			expr: "30 2 * * *", tz: "America/New_York",
			from: "2090-03-11T00:00:00Z", to: "2090-03-14T00:00:00Z",
			want: []string{"2090-03-11T07:30:00Z", "2090-03-12T07:30:00Z", "2090-03-13T06:30:00Z"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.expr, tc.tz)
			from, to := ts(t, tc.from), ts(t, tc.to)
			want := make([]time.Time, len(tc.want))
			for i, w := range tc.want {
				want[i] = ts(t, w)
			}
			require.Equal(t, want, ticksBetween(s, from, to))

			slots, err := s.Slots(from, to, farFuture, 1000)
			require.NoError(t, err)
			require.Equal(t, want, logicalDates(slots))
			for _, sl := range slots {
				require.Equal(t, s.Next(sl.LogicalDate), sl.IntervalEnd)
				require.Equal(t, time.UTC, sl.LogicalDate.Location())
				require.Equal(t, time.UTC, sl.IntervalEnd.Location())
			}
		})
	}
}

func TestNext(t *testing.T) {
	ny := mustParse(t, "30 2 * * *", "America/New_York")
	tests := []struct {
		name string
		s    *Schedule
		in   time.Time
		want string
	}{
		{"strictly after a tick", ny, ts(t, "2024-03-09T07:30:00Z"), "2024-03-10T07:30:00Z"},
		{"just before a tick", ny, ts(t, "2024-03-10T07:29:59.999999999Z"), "2024-03-10T07:30:00Z"},
		{"fraction after a tick", ny, ts(t, "2024-03-10T07:30:00.000001Z"), "2024-03-11T06:30:00Z"},
		{"from inside the gap", ny, ts(t, "2024-03-10T07:10:00Z"), "2024-03-10T07:30:00Z"},
		{"input location is irrelevant", ny, ts(t, "2024-03-10T07:10:00Z").In(time.FixedZone("X", 3600*7)), "2024-03-10T07:30:00Z"},
		{"zero time", mustParse(t, "@yearly", "UTC"), time.Time{}, "0002-01-01T00:00:00Z"},
		{"hourly from the repeated hour", mustParse(t, "@hourly", "America/New_York"), ts(t, "2024-11-03T05:30:00Z"), "2024-11-03T06:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.Next(tc.in)
			require.Equal(t, ts(t, tc.want), got)
			require.Equal(t, time.UTC, got.Location())
		})
	}
	require.True(t, ny.Next(time.Unix(1<<62, 0)).IsZero(), "beyond the supported range")
}

// TestYearCounts checks tick counts over 2024 (both ends included) where they
// follow from the contract: hourly schedules tick every real hour in zones
// whose offsets change by whole hours, fixed-time ones once per local day.
func TestYearCounts(t *testing.T) {
	tests := []struct {
		expr, tz string
		want     int
	}{
		{"@hourly", "UTC", 8785},
		{"@hourly", "America/New_York", 8785},
		{"@hourly", "Europe/London", 8785},
		{"@hourly", "Asia/Kolkata", 8784}, // ticks at half past UTC hours
		{"@daily", "America/New_York", 366},
		{"@daily", "Europe/London", 367}, // 2025-01-01 00:00 GMT is the inclusive end
		{"@daily", "Australia/Lord_Howe", 366},
		{"@daily", "Asia/Kolkata", 366},
		{"30 2 * * *", "America/New_York", 366},
		{"30 1 * * *", "Europe/London", 366},
		{"15 2 * * *", "Australia/Lord_Howe", 366},
		{"45 1 * * *", "Australia/Lord_Howe", 366},
		{"0 9 * * 1-5", "Asia/Kolkata", 262},
	}
	from, to := ts(t, "2024-01-01T00:00:00Z"), ts(t, "2025-01-01T00:00:00Z")
	for _, tc := range tests {
		t.Run(tc.expr+" "+tc.tz, func(t *testing.T) {
			slots, err := mustParse(t, tc.expr, tc.tz).Slots(from, to, farFuture, 10_000)
			require.NoError(t, err)
			require.Equal(t, tc.want, len(slots))
			for i := 1; i < len(slots); i++ {
				require.True(t, slots[i].LogicalDate.After(slots[i-1].LogicalDate))
			}
		})
	}
}

package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// farFuture is a "now" after every window in these tests, so that only the
// window bounds limit the slots.
var farFuture = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)

func ts(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v.UTC()
}

func mustParse(t testing.TB, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	require.NoError(t, err, "Parse(%q, %q)", expr, tz)
	return s
}

// ticksBetween lists the ticks in [from, to] by calling Next, a path
// independent of Slots.
func ticksBetween(s *Schedule, from, to time.Time) []time.Time {
	var out []time.Time
	for t := s.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

func logicalDates(slots []Slot) []time.Time {
	out := make([]time.Time, len(slots))
	for i, sl := range slots {
		out[i] = sl.LogicalDate
	}
	return out
}

func TestParseAccepts(t *testing.T) {
	exprs := []string{
		"* * * * *", "0 * * * *", "*/15 9-17 * * MON-FRI", "0 0 1 JAN,jul *",
		"0 12 * * sun", "5-20/5 */2 1,15 * *", "0 0 29 2 *", " 0 0 * * * ", "0 0 ? * 1",
		"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually",
	}
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"}
	for _, expr := range exprs {
		for _, tz := range zones {
			s, err := Parse(expr, tz)
			require.NoError(t, err, "Parse(%q, %q)", expr, tz)
			require.NotNil(t, s)
		}
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		want           error
	}{
		{"every", "@every 1h", "UTC", ErrInvalidSchedule},
		{"reboot", "@reboot", "UTC", ErrInvalidSchedule},
		{"preset case", "@DAILY", "UTC", ErrInvalidSchedule},
		{"unknown preset", "@fortnightly", "UTC", ErrInvalidSchedule},
		{"seconds field", "0 0 0 * * *", "UTC", ErrInvalidSchedule},
		{"four fields", "0 0 * *", "UTC", ErrInvalidSchedule},
		{"empty", "", "UTC", ErrInvalidSchedule},
		{"blank", "   ", "UTC", ErrInvalidSchedule},
		{"bogus", "bogus", "UTC", ErrInvalidSchedule},
		{"never fires feb 30", "0 0 30 2 *", "UTC", ErrInvalidSchedule},
		{"never fires 31st of short months", "0 0 31 4,6,9,11 *", "America/New_York", ErrInvalidSchedule},
		{"TZ prefix", "TZ=UTC 0 0 * * *", "UTC", ErrInvalidSchedule},
		{"CRON_TZ prefix", "CRON_TZ=UTC 0 0 * * *", "UTC", ErrInvalidSchedule},
		{"TZ prefix alone", "TZ=UTC", "UTC", ErrInvalidSchedule},
		{"minute out of range", "60 * * * *", "UTC", ErrInvalidSchedule},
		{"hour out of range", "* 24 * * *", "UTC", ErrInvalidSchedule},
		{"weekday 7", "* * * * 7", "UTC", ErrInvalidSchedule},
		{"zero step", "*/0 * * * *", "UTC", ErrInvalidSchedule},
		{"reversed range", "0 5-1 * * *", "UTC", ErrInvalidSchedule},
		{"empty timezone", "@daily", "", ErrInvalidTimezone},
		{"Local", "@daily", "Local", ErrInvalidTimezone},
		{"unknown zone", "@daily", "Mars/Phobos", ErrInvalidTimezone},
		{"path escape", "@daily", "../../etc/passwd", ErrInvalidTimezone},
		{"absolute path", "@daily", "/etc/localtime", ErrInvalidTimezone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr, tc.tz)
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, s)
			other := ErrInvalidTimezone
			if errors.Is(tc.want, ErrInvalidTimezone) {
				other = ErrInvalidSchedule
			}
			require.NotErrorIs(t, err, other)
		})
	}
}

func TestSlotsWindow(t *testing.T) {
	daily := mustParse(t, "@daily", "UTC")
	hourly := mustParse(t, "@hourly", "UTC")
	tests := []struct {
		name          string
		s             *Schedule
		from, to, now string
		max           int
		want          []string
		wantErr       error
	}{
		{
			name: "hourly month: 744 hours of January plus the inclusive end tick",
			s:    hourly, from: "2024-01-01T00:00:00Z", to: "2024-02-01T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 1000, want: nil, // length checked below
		},
		{
			name: "interval not ended is excluded",
			s:    daily, from: "2024-01-01T00:00:00Z", to: "2024-01-05T00:00:00Z", now: "2024-01-04T00:00:00Z",
			max: 10, want: []string{"2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"},
		},
		{
			name: "interval ending a nanosecond after now is excluded",
			s:    daily, from: "2024-01-01T00:00:00Z", to: "2024-01-05T00:00:00Z", now: "2024-01-03T23:59:59.999999999Z",
			max: 10, want: []string{"2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"},
		},
		{
			name: "from between ticks",
			s:    daily, from: "2024-01-01T00:00:00.000000001Z", to: "2024-01-03T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 10, want: []string{"2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"},
		},
		{
			name: "to between ticks",
			s:    daily, from: "2024-01-01T00:00:00Z", to: "2024-01-02T23:59:59Z", now: "3000-01-01T00:00:00Z",
			max: 10, want: []string{"2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"},
		},
		{
			name: "from == to on a tick",
			s:    daily, from: "2024-01-02T00:00:00Z", to: "2024-01-02T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 10, want: []string{"2024-01-02T00:00:00Z"},
		},
		{
			name: "from == to between ticks",
			s:    daily, from: "2024-01-02T12:00:00Z", to: "2024-01-02T12:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 10, want: []string{},
		},
		{
			name: "from after to",
			s:    daily, from: "2024-01-03T00:00:00Z", to: "2024-01-01T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 0, want: []string{},
		},
		{
			name: "window entirely after now",
			s:    daily, from: "2024-01-03T00:00:00Z", to: "2024-01-09T00:00:00Z", now: "2024-01-01T00:00:00Z",
			max: 0, want: []string{},
		},
		{
			name: "exactly max",
			s:    daily, from: "2024-01-01T00:00:00Z", to: "2024-01-03T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 3, want: []string{"2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"},
		},
		{
			name: "max+1",
			s:    daily, from: "2024-01-01T00:00:00Z", to: "2024-01-04T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 3, wantErr: ErrTooManySlots,
		},
		{
			name: "max zero with a slot",
			s:    daily, from: "2024-01-01T00:00:00Z", to: "2024-01-01T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 0, wantErr: ErrTooManySlots,
		},
		{
			name: "every minute for a century stops at max+1",
			s:    mustParse(t, "* * * * *", "America/New_York"), from: "2000-01-01T00:00:00Z", to: "2100-01-01T00:00:00Z", now: "3000-01-01T00:00:00Z",
			max: 5000, wantErr: ErrTooManySlots,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slots, err := tc.s.Slots(ts(t, tc.from), ts(t, tc.to), ts(t, tc.now), tc.max)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, slots)
				return
			}
			require.NoError(t, err)
			if tc.want == nil {
				require.Len(t, slots, 745)
				require.Equal(t, ts(t, "2024-01-01T00:00:00Z"), slots[0].LogicalDate)
				require.Equal(t, ts(t, "2024-02-01T00:00:00Z"), slots[744].LogicalDate)
				require.Equal(t, ts(t, "2024-02-01T01:00:00Z"), slots[744].IntervalEnd)
				return
			}
			want := make([]time.Time, len(tc.want))
			for i, w := range tc.want {
				want[i] = ts(t, w)
			}
			require.NotNil(t, slots)
			require.Equal(t, want, logicalDates(slots))
		})
	}
}

func TestTooManySlotsBoundary(t *testing.T) {
	s := mustParse(t, "@hourly", "UTC")
	from, to := ts(t, "2024-01-01T00:00:00Z"), ts(t, "2024-02-01T00:00:00Z")
	slots, err := s.Slots(from, to, farFuture, 745)
	require.NoError(t, err)
	require.Len(t, slots, 745)
	_, err = s.Slots(from, to, farFuture, 744)
	require.ErrorIs(t, err, ErrTooManySlots)
}

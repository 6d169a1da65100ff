package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A window over the cap says how many slots it holds, exactly while counting stays cheap,
// and as a lower bound past CountBeyond more.
func TestSlotsOverTheCapSayHowManyTheWindowHolds(t *testing.T) {
	t.Parallel()
	from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expr, tz string
		to       time.Time
		max      int
		count    int
		exact    bool
	}{
		{"@daily", "UTC", time.Date(2024, 12, 31, 0, 0, 0, 0, time.UTC), 100, 366, true},
		{"@daily", "UTC", time.Date(2024, 12, 31, 0, 0, 0, 0, time.UTC), 0, 366, true},
		{"@hourly", "Europe/Berlin", time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC), 365, 366 * 24, true},
		{"0 2 * * *", "America/New_York", time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC), 10, 366, true},
		{"* * * * *", "UTC", time.Date(2034, 1, 1, 0, 0, 0, 0, time.UTC), 1000, 1000 + CountBeyond, false},
	} {
		s, err := Parse(c.expr, c.tz)
		require.NoError(t, err)
		slots, err := s.Slots(from, c.to, now, c.max)
		require.Nil(t, slots)
		require.ErrorIs(t, err, ErrTooManySlots)
		var tm *TooManySlotsError
		require.True(t, errors.As(err, &tm))
		require.Equal(t, TooManySlotsError{Max: c.max, Count: c.count, Exact: c.exact}, *tm, "%s in %s", c.expr, c.tz)
		if c.exact {
			all, err := s.Slots(from, c.to, now, c.count)
			require.NoError(t, err)
			require.Len(t, all, c.count, "the count is the slots listed with a cap that fits")
		}
	}
}

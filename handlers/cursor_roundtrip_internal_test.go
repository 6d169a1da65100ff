package handlers

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every key a listing writes into next_cursor is read back as the same key, and keys in any
// other spelling of the same value (which PostgreSQL might refuse, or read as another value)
// are refused: the cursor check accepts exactly what nextCursor writes.
func TestCursorKeysRoundTripAndOtherSpellingsAreRefused(t *testing.T) {
	t.Parallel()
	s := &Server{defaults: specDefaults{limit: 50}}
	dates := []time.Time{
		time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 3, 10, 7, 30, 0, 500_000_000, time.FixedZone("", -5*3600)),
		time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC),
	}
	cases := []struct {
		list  listing
		order string
		good  []string
		bad   []string
	}{
		{backfillListing, "id",
			[]string{strconv.FormatInt(1, 10), strconv.FormatInt(-7, 10), strconv.FormatInt(1<<63-1, 10)},
			[]string{"+1", "01", " 1", "1 ", "1e0", "0x1", "-0", "1_000", "9223372036854775808", "abc"}},
		{slotListing, "sort_ordinal",
			[]string{strconv.Itoa(1), strconv.Itoa(100000)},
			[]string{"+1", "007", "\t1", "3000000000", "1.0"}},
		{runListing, "", nil, []string{
			"2024-01-01T00:00:00+16:00", "2024-01-01T00:00:00-23:59", "2024-01-01T00:00:00+00:60",
			"2024-01-01T00:00:00+00:00", "2024-01-01T00:00:00z", "2024-01-01T00:00:00.1234567Z",
			"2024-01-01T00:00:00.10Z", "2024-01-01 00:00:00Z", "0000-01-01T00:00:00Z",
			"0001-01-01T00:00:00+00:01", "2024-02-30T00:00:00Z",
		}},
		{dagListing, "", []string{"a", "sales.daily-2"}, []string{".", "..", "a b", "a/b"}},
	}
	for _, d := range dates {
		cases[2].good = append(cases[2].good, d.UTC().Format(time.RFC3339Nano))
	}
	for _, c := range cases {
		for _, k := range c.good {
			raw := cursor{List: c.list.name, Order: c.order, Key: k}.encode()
			pr, prob := s.pageOf(nil, nil, raw, c.list, c.order)
			require.Nil(t, prob, "%s %q", c.list.name, k)
			require.Equal(t, k, *pr.after, "%s: the key comes back as written", c.list.name)
		}
		for _, k := range c.bad {
			raw := cursor{List: c.list.name, Order: c.order, Key: k}.encode()
			_, prob := s.pageOf(nil, nil, raw, c.list, c.order)
			require.NotNil(t, prob, "%s %q", c.list.name, k)
			require.EqualValues(t, 400, prob.Status)
			require.Equal(t, "cursor", (*prob.Errors)[0].Field)
		}
	}
}

// Whatever a forged runs cursor holds, a key that is taken is one PostgreSQL reads as the
// same instant: UTC, years 1-9999, microseconds at most, written as the listing writes it.
func FuzzRunCursorKey(f *testing.F) {
	for _, k := range []string{
		"2024-01-01T00:00:00Z", "2024-01-01T00:00:00.5Z", "2024-01-01T00:00:00+16:00",
		"2024-01-01T00:00:00-23:59", "2024-01-01T00:00:00+00:60", "0000-12-31T23:00:00-01:00",
		"9999-12-31T23:59:59.999999Z", "2024-01-01T00:00:00.1234567Z",
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if !runListing.keyValid(k) {
			return
		}
		ts, err := time.Parse(time.RFC3339Nano, k)
		require.NoError(t, err)
		_, off := ts.Zone()
		require.Zero(t, off, k)
		require.True(t, ts.Year() >= 1 && ts.Year() <= 9999, k)
		require.Zero(t, ts.Nanosecond()%1000, k)
		require.Equal(t, k, ts.UTC().Format(time.RFC3339Nano))
	})
}

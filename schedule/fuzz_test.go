package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

var fuzzBase = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	fuzzYears   = 300 // windows start between 1900 and 2200
	fuzzMaxSpan = 90 * 24 * 60
	fuzzMaxNow  = 30 * 24 * 60
	fuzzMaxMax  = 3000
)

func fuzzWindow(fromMin int64, fromSec uint8, spanMin uint32, nowMin int32) (from, to, now time.Time) {
	minutes := int64(fuzzYears * 366 * 24 * 60)
	from = fuzzBase.Add(time.Duration((fromMin%minutes+minutes)%minutes) * time.Minute).
		Add(time.Duration(fromSec%61) * time.Second)
	to = from.Add(time.Duration(spanMin%fuzzMaxSpan) * time.Minute)
	now = to.Add(time.Duration(int64(nowMin)%fuzzMaxNow) * time.Minute)
	return from, to, now
}

func FuzzParseAndSlots(f *testing.F) {
	exprs := []string{
		"* * * * *", "0 * * * *", "30 */1 * * *", "@hourly", "@daily", "@midnight", "@weekly", "@monthly",
		"@yearly", "@annually", "30 2 * * *", "30 1 * * *", "0 2,3 * * *", "0,45 2,3 * * *", "* 1 * * *",
		"0 */6 * * *", "0 9 * * 1-5", "0 0 1 * 1", "0 0 29 2 *", "0 0 29 2 MON", "*/15 9-17 * JAN-MAR sun",
		"@every 1h", "@reboot", "0 0 0 * * *", "", "bogus", "0 0 30 2 *", "TZ=UTC", "CRON_TZ=UTC 0 0 * * *",
		"* 0-22 * * *", "59 23 31 12 *", "0 0 ? * 1", "1-2-3 * * * *", "*/0 * * * *",
	}
	zones := []string{
		"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata",
		"Pacific/Apia", "America/Sao_Paulo", "Local", "", "Mars/Phobos",
	}
	for i, expr := range exprs {
		tz := zones[i%len(zones)]
		f.Add(expr, tz, int64(i)*7919*60*24, uint8(i), uint32(i*977), int32(i*131-400), uint16(i*97))
	}
	// The DST days of the tests, as offsets from fuzzBase in minutes.
	dst := func(s string) int64 {
		v, _ := time.Parse(time.RFC3339, s)
		return int64(v.Sub(fuzzBase) / time.Minute)
	}
	f.Add("30 2 * * *", "America/New_York", dst("2024-03-09T00:00:00Z"), uint8(0), uint32(3*24*60), int32(60), uint16(100))
	f.Add("@hourly", "America/New_York", dst("2024-11-02T00:00:00Z"), uint8(0), uint32(3*24*60), int32(60), uint16(100))
	f.Add("15 2 * * *", "Australia/Lord_Howe", dst("2024-10-04T00:00:00Z"), uint8(0), uint32(3*24*60), int32(60), uint16(100))
	f.Add("@daily", "Pacific/Apia", dst("2011-12-27T00:00:00Z"), uint8(0), uint32(6*24*60), int32(60), uint16(100))

	f.Fuzz(func(t *testing.T, expr, tz string, fromMin int64, fromSec uint8, spanMin uint32, nowMin int32, maxRaw uint16) {
		s, err := Parse(expr, tz)
		if err != nil {
			if !errors.Is(err, ErrInvalidSchedule) && !errors.Is(err, ErrInvalidTimezone) {
				t.Fatalf("Parse(%q, %q): unexpected error %v", expr, tz, err)
			}
			return
		}
		from, to, now := fuzzWindow(fromMin, fromSec, spanMin, nowMin)
		max := int(maxRaw % fuzzMaxMax)
		slots, err := s.Slots(from, to, now, max)
		if err != nil {
			if !errors.Is(err, ErrTooManySlots) || slots != nil {
				t.Fatalf("Slots: %v, %d slots", err, len(slots))
			}
			// More than max: the first max+1 slots exist.
			more, err := s.Slots(from, to, now, max+1)
			if err == nil && len(more) != max+1 {
				t.Fatalf("Slots refused max=%d but max+1 gave %d", max, len(more))
			}
			return
		}
		if len(slots) > max {
			t.Fatalf("%d slots for max %d", len(slots), max)
		}
		checkSlots(t, s, slots, from, to, now)
		if len(slots) > 0 {
			if _, err := s.Slots(from, to, now, len(slots)-1); !errors.Is(err, ErrTooManySlots) {
				t.Fatalf("max=%d with %d slots: err %v", len(slots)-1, len(slots), err)
			}
		}
		if tz == "UTC" {
			checkRobfig(t, expr, s, from)
		}
	})
}

// checkSlots verifies the Slots contract, including that no slot is missing.
func checkSlots(t *testing.T, s *Schedule, slots []Slot, from, to, now time.Time) {
	t.Helper()
	first := s.Next(from.Add(-time.Nanosecond))
	for i, sl := range slots {
		lt, end := sl.LogicalDate, sl.IntervalEnd
		switch {
		case lt.Location() != time.UTC || end.Location() != time.UTC:
			t.Fatalf("slot %d not in UTC", i)
		case lt.Before(from) || lt.After(to):
			t.Fatalf("slot %d at %s outside [%s, %s]", i, lt, from, to)
		case !end.After(lt) || !end.Equal(s.Next(lt)):
			t.Fatalf("slot %d: interval end %s, Next %s", i, end, s.Next(lt))
		case end.After(now):
			t.Fatalf("slot %d: interval end %s after now %s", i, end, now)
		case i == 0 && !lt.Equal(first):
			t.Fatalf("first slot %s, first tick %s", lt, first)
		case i > 0 && !lt.Equal(slots[i-1].IntervalEnd):
			t.Fatalf("slot %d at %s does not follow %s", i, lt, slots[i-1].IntervalEnd)
		}
	}
	// The tick after the last slot must be out of the window or unfinished.
	next := first
	if len(slots) > 0 {
		next = slots[len(slots)-1].IntervalEnd
	}
	if !next.IsZero() && !next.After(to) && !s.Next(next).After(now) {
		t.Fatalf("slot at %s is missing", next)
	}
}

// checkRobfig compares a few ticks with robfig's, which are right in UTC.
func checkRobfig(t *testing.T, expr string, s *Schedule, from time.Time) {
	t.Helper()
	sched, err := cron.ParseStandard(strings.TrimSpace(expr))
	if err != nil {
		t.Fatalf("robfig rejects %q: %v", expr, err)
	}
	spec := sched.(*cron.SpecSchedule)
	spec.Location = time.UTC
	a, b := from, from
	for range 20 {
		if a, b = s.Next(a), spec.Next(b); b.IsZero() {
			return // robfig gives up after five years
		}
		if !a.Equal(b) {
			t.Fatalf("%q after %s: %s, robfig %s", expr, from, a, b)
		}
	}
}

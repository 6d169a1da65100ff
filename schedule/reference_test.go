package schedule

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

// The reference below restates the DST contract by brute force, from what
// the zone database says each minute's clock shows, with none of the
// package's span arithmetic.

// refZone is every minute of a window with the wall clock it shows.
type refZone struct {
	insts, walls []int64
	// Indexed by (wall - wall0) / 60 over every wall minute in the window:
	// the first instant showing it (or -1), and for a wall time no instant
	// shows, the size of the forward jump that skipped it.
	wall0   int64
	first   []int64
	skipped []int64
	fields  []wallFields
}

type wallFields struct{ minute, hour, dom, month, wday int }

func newRefZone(t testing.TB, tz string, from, to time.Time) *refZone {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	require.NoError(t, err)
	z := &refZone{}
	for u := from.Unix(); u <= to.Unix(); u += 60 {
		lt := time.Unix(u, 0).In(loc)
		wall := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), 0, time.UTC).Unix()
		z.insts = append(z.insts, u)
		z.walls = append(z.walls, wall)
	}
	z.wall0 = slices.Min(z.walls)
	n := (slices.Max(z.walls)-z.wall0)/60 + 1
	z.first, z.skipped, z.fields = make([]int64, n), make([]int64, n), make([]wallFields, n)
	for i := range z.first {
		z.first[i] = -1
		w := time.Unix(z.wall0+int64(i)*60, 0).UTC()
		z.fields[i] = wallFields{w.Minute(), w.Hour(), w.Day(), int(w.Month()), int(w.Weekday())}
	}
	for i, wall := range z.walls {
		k := (wall - z.wall0) / 60
		if z.first[k] < 0 {
			z.first[k] = z.insts[i]
		}
		if i > 0 && wall > z.walls[i-1]+60 {
			for g := z.walls[i-1] + 60; g < wall; g += 60 {
				z.skipped[(g-z.wall0)/60] = wall - (z.walls[i-1] + 60)
			}
		}
	}
	return z
}

func refMatch(spec *cron.SpecSchedule, w wallFields) bool {
	bit := func(mask uint64, v int) bool { return mask&(1<<uint(v)) != 0 }
	if !bit(spec.Minute, w.minute) || !bit(spec.Hour, w.hour) || !bit(spec.Month, w.month) {
		return false
	}
	dom, dow := bit(spec.Dom, w.dom), bit(spec.Dow, w.wday)
	if spec.Dom&starBit != 0 || spec.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// ticks applies the contract: sub-daily schedules tick at every instant whose
// clock matches; others tick once per matching wall time, at its first
// occurrence, or if it is skipped, when the clock shows it plus the jump.
func (z *refZone) ticks(t testing.TB, expr string) []int64 {
	t.Helper()
	sched, err := cron.ParseStandard(expr)
	require.NoError(t, err)
	spec := sched.(*cron.SpecSchedule)
	var out []int64
	if spec.Hour&allHours == allHours {
		for i, wall := range z.walls {
			if refMatch(spec, z.fields[(wall-z.wall0)/60]) {
				out = append(out, z.insts[i])
			}
		}
		return out
	}
	seen := map[int64]bool{}
	for k := range z.first {
		if !refMatch(spec, z.fields[k]) {
			continue
		}
		u := z.first[k]
		if jump := z.skipped[k]; u < 0 && jump > 0 && k+int(jump/60) < len(z.first) {
			u = z.first[k+int(jump/60)]
		}
		if u >= 0 && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

func TestAgainstReference(t *testing.T) {
	exprs := []string{
		"@hourly", "*/20 * * * *", "0 * * * 1", "15 */1 1-7 * *", "@daily", "30 2 * * *",
		"15 1,2 * * *", "0 */6 * * *", "45 1 * * *", "* 2 * * *", "0,30 0-3 * * *",
		"@weekly", "0 2 * * *", "59 23 * * *", "0 3 * * *", "* 0-22 * * *",
	}
	windows := []struct {
		tz       string
		from, to string
	}{
		{"America/New_York", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"Europe/London", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"Australia/Lord_Howe", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"Asia/Kolkata", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"Pacific/Apia", "2011-01-01T00:00:00Z", "2012-03-01T00:00:00Z"},
		{"America/Sao_Paulo", "2018-01-01T00:00:00Z", "2019-03-01T00:00:00Z"}, // midnight DST changes
		// Past the zone files' last transitions, where Go applies the POSIX
		// rule and its zone bounds need checking (2040 is a leap year).
		{"Australia/Lord_Howe", "2037-06-01T00:00:00Z", "2038-06-01T00:00:00Z"},
		{"Europe/London", "2040-06-01T00:00:00Z", "2041-06-01T00:00:00Z"},
		{"America/New_York", "2040-06-01T00:00:00Z", "2041-06-01T00:00:00Z"},
	}
	for _, w := range windows {
		t.Run(w.tz+"/"+w.from[:4], func(t *testing.T) {
			t.Parallel()
			from, to := ts(t, w.from), ts(t, w.to)
			// Scan two days beyond the window so that edge ticks are resolved.
			z := newRefZone(t, w.tz, from.Add(-48*time.Hour), to.Add(48*time.Hour))
			for _, expr := range exprs {
				var want []int64
				for _, u := range z.ticks(t, expr) {
					if u >= from.Unix() && u <= to.Unix() {
						want = append(want, u)
					}
				}
				s := mustParse(t, expr, w.tz)
				slots, err := s.Slots(from, to, farFuture, 1_000_000)
				require.NoError(t, err)
				got := make([]int64, len(slots))
				for i, sl := range slots {
					got[i] = sl.LogicalDate.Unix()
					// Plain checks: require's per-call cost dominates at this volume.
					if sl.LogicalDate.Location() != time.UTC || sl.IntervalEnd.Location() != time.UTC {
						t.Fatalf("%s: slot %d not in UTC", expr, i)
					}
					if i > 0 && (got[i] <= got[i-1] || !slots[i-1].IntervalEnd.Equal(sl.LogicalDate)) {
						t.Fatalf("%s: slots %d and %d are not strictly increasing and contiguous", expr, i-1, i)
					}
				}
				require.NotEmpty(t, want, expr)
				require.Equal(t, want, got, "%s in %s", expr, w.tz)
			}
		})
	}
}

// In zones without DST the package must agree with robfig, whose Next is
// correct there.
func TestAgreesWithRobfigWithoutDST(t *testing.T) {
	exprs := []string{
		"* * * * *", "0 * * * *", "*/7 3-19/4 * * *", "0 0 1 * 1", "0 0 13 * FRI", "30 5 1,15 * *",
		"0 12 * JAN,jun sat", "@daily", "@weekly", "@monthly", "@yearly", "0 0 29 2 *", "0 0 */2 * 1",
	}
	for _, tz := range []string{"UTC", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(tz)
		require.NoError(t, err)
		for _, expr := range exprs {
			sched, err := cron.ParseStandard(expr)
			require.NoError(t, err)
			spec := sched.(*cron.SpecSchedule)
			spec.Location = loc
			s := mustParse(t, expr, tz)
			a, b := ts(t, "2000-01-01T00:00:00Z"), ts(t, "2000-01-01T00:00:00Z")
			for range 500 {
				a, b = s.Next(a), spec.Next(b)
				if b.IsZero() && expr == "0 0 29 2 *" {
					break // robfig gives up after five years
				}
				require.True(t, a.Equal(b), "%s in %s: %s != robfig %s", expr, tz, a, b)
			}
		}
	}
}

// The package relies on ZoneBounds describing consecutive, gapless stretches
// of constant offset, including past the zone file's last transition where Go
// computes them from the POSIX rule.
func TestZoneSpansTile(t *testing.T) {
	var wg sync.WaitGroup
	for _, tz := range []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata", "America/Sao_Paulo"} {
		loc, err := time.LoadLocation(tz)
		require.NoError(t, err)
		wg.Go(func() {
			u := ts(t, "1850-01-01T00:00:00Z").Unix()
			end := ts(t, "2150-01-01T00:00:00Z").Unix()
			prev := spanAt(loc, u)
			for prev.end < end {
				sp := spanAt(loc, prev.end)
				_, offStart := time.Unix(sp.start, 0).In(loc).Zone()
				_, offLast := time.Unix(min(sp.end, maxInstant)-1, 0).In(loc).Zone()
				ok := sp.start == prev.end && sp.start < sp.end &&
					int64(offStart) == sp.off && int64(offLast) == sp.off &&
					sp.prevOff == prev.off && prev.nextOff == sp.off && sp.prevStart == prev.start
				if !ok {
					t.Errorf("%s: span %+v does not follow %+v", tz, sp, prev)
					return
				}
				prev = sp
			}
		})
	}
	wg.Wait()

	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	sp := spanAt(ny, ts(t, "2024-06-01T00:00:00Z").Unix())
	require.Equal(t, ts(t, "2024-03-10T07:00:00Z").Unix(), sp.start)
	require.Equal(t, ts(t, "2024-11-03T06:00:00Z").Unix(), sp.end)
	require.Equal(t, []int64{-5 * 3600, -4 * 3600, -5 * 3600}, []int64{sp.prevOff, sp.off, sp.nextOff})
}

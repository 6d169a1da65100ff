package schedule

import "time"

// Instants are handled as Unix seconds: every tick is a whole second (cron has
// no sub-minute fields and zone offsets are whole seconds).

const (
	// minInstant and maxInstant stand for "no zone transition on this side";
	// they leave headroom for adding offsets and limits without overflow.
	minInstant = -(int64(1) << 62)
	maxInstant = int64(1) << 62

	// supportedAbs bounds the instants worked with (about ±35 million years)
	// so that arithmetic on them cannot approach the sentinels.
	supportedAbs = int64(1) << 50

	// searchLimit bounds the search for one tick. The sparsest schedule that
	// can fire at all (February 29th under the AND day rule) is 8 years apart
	// across 2100; a DST gap moves a tick by at most a day.
	searchLimit = 10 * 366 * secondsPerDay
)

var (
	minSupported = time.Unix(-supportedAbs, 0)
	maxSupported = time.Unix(supportedAbs, 0)
)

// span is one stretch of constant zone offset [start, end), with what is
// needed about its neighbours to tell DST gaps and overlaps apart.
type span struct {
	start, end int64
	off        int64 // seconds east of UTC
	prevStart  int64
	prevOff    int64 // offset before start (== off when there is none)
	nextOff    int64 // offset from end on (== off when there is none)
}

// offsetAt returns the zone offset at instant u, in seconds east of UTC.
func offsetAt(loc *time.Location, u int64) int64 {
	_, off := time.Unix(u, 0).In(loc).Zone()
	return int64(off)
}

// rawBounds returns the offset at u and an interval around u on which it is
// constant. It starts from ZoneBounds but checks it, because past the zone
// file's last transition Go computes bounds from the POSIX rule and documents
// them as accurate only near transitions; they can be cut at year ends, and on
// the last day of a leap year the end can even be at or before u.
func rawBounds(loc *time.Location, u int64) (off, start, end int64) {
	t := time.Unix(u, 0).In(loc)
	_, o := t.Zone()
	off, start, end = int64(o), minInstant, maxInstant
	st, en := t.ZoneBounds()
	if !st.IsZero() {
		start = min(st.Unix(), u)
	}
	if !en.IsZero() {
		end = en.Unix()
		if end <= u {
			end = (floorDiv(u, secondsPerDay) + 1) * secondsPerDay
		}
	}
	if end < maxInstant && offsetAt(loc, end-1) != off {
		// The first instant in (u, end) with another offset.
		end = firstTrue(u, end-1, func(x int64) bool { return offsetAt(loc, x) != off })
	}
	if start > minInstant && offsetAt(loc, start) != off {
		// Just after the last instant in [start, u) with another offset.
		start = firstTrue(start, u, func(x int64) bool { return offsetAt(loc, x) == off })
	}
	return off, start, end
}

// firstTrue is the least x in (lo, hi] for which pred holds, by bisection: pred must be false
// at lo, true at hi, and change only once in between.
func firstTrue(lo, hi int64, pred func(int64) bool) int64 {
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; pred(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// maxMerges bounds how many boundaries that do not change the offset (year
// cuts, abbreviation-only changes) are merged over; any left are treated as
// no transition, which is what they are.
const maxMerges = 8

// realBounds widens rawBounds over boundaries where the offset does not
// change, so that a span's start and end are real offset changes: DST gaps
// and overlaps are recognised only there.
func realBounds(loc *time.Location, u int64) (off, start, end int64) {
	off, start, end = rawBounds(loc, u)
	for i := 0; i < maxMerges && start > minInstant; i++ {
		o, s, _ := rawBounds(loc, start-1)
		if o != off {
			break
		}
		start = s
	}
	for i := 0; i < maxMerges && end < maxInstant; i++ {
		o, _, e := rawBounds(loc, end)
		if o != off {
			break
		}
		end = e
	}
	return off, start, end
}

// spanAt returns the span containing instant u. It relies only on the
// documented Zone and ZoneBounds (checked), never on how time.Date resolves
// nonexistent or ambiguous wall times.
func spanAt(loc *time.Location, u int64) span {
	off, start, end := realBounds(loc, u)
	sp := span{
		start: start, end: end, off: off,
		prevStart: minInstant, prevOff: off, nextOff: off,
	}
	if start > minInstant {
		sp.prevOff, sp.prevStart, _ = realBounds(loc, start-1)
	}
	if end < maxInstant {
		sp.nextOff = offsetAt(loc, end)
	}
	return sp
}

// ticker finds successive ticks, remembering the last zone spans it looked up
// because consecutive ticks nearly always fall in the same span.
type ticker struct {
	s     *Schedule
	cache [2]span
	n     int // valid cache entries
	older int // entry to replace next
}

func (it *ticker) span(u int64) span {
	for i := 0; i < it.n; i++ {
		if c := it.cache[i]; c.start <= u && u < c.end {
			return c
		}
	}
	sp := spanAt(it.s.loc, u)
	if it.n < len(it.cache) {
		it.cache[it.n] = sp
		it.n++
	} else {
		it.cache[it.older] = sp
		it.older = (it.older + 1) % len(it.cache)
	}
	return sp
}

// atOrAfter returns the first tick at or after instant lo, or false if there
// is none within searchLimit.
//
// A span's ticks all lie at or after its start, but a fixed schedule's ticks
// for wall times in a gap lie after the span's end, among the next span's
// ticks. So the spans are walked in order, keeping the earliest candidate,
// until a span starts after it.
func (it *ticker) atOrAfter(lo int64) (int64, bool) {
	limit := lo + searchLimit
	sp := it.span(lo)
	if it.s.fixed {
		// The previous span's gap ticks may still be ahead of lo.
		for i := 0; i < 4 && sp.start > minInstant && sp.prevOff < sp.off && lo < sp.start+(sp.off-sp.prevOff); i++ {
			sp = it.span(sp.start - 1)
		}
	}
	var best int64
	found := false
	for sp.start <= limit {
		if found && sp.start >= best {
			break
		}
		if u, ok := it.firstIn(sp, lo, limit); ok && (!found || u < best) {
			best, found = u, true
		}
		if sp.end >= maxInstant || (found && best < sp.end) {
			break
		}
		sp = it.span(sp.end)
	}
	return best, found
}

// firstIn returns the first tick at or after lo (and not after limit) that
// belongs to span sp: a matching wall time w owned by sp ticks at w - sp.off.
//
// For sub-daily schedules sp owns the wall times its instants show. A fixed
// schedule also owns the wall times skipped by a forward shift at sp.end
// (their instant, w - sp.off, is the same wall time after the shift), and
// gives up the wall times repeated after a backward shift at sp.start (their
// first occurrence belongs to the previous span).
func (it *ticker) firstIn(sp span, lo, limit int64) (int64, bool) {
	s, o := it.s, sp.off
	from := max(lo, sp.start)
	hi := sp.end // exclusive, as an instant
	if s.fixed && sp.end < maxInstant && sp.nextOff > o {
		hi += sp.nextOff - o
	}
	hi = min(hi, limit+1)
	if from >= hi {
		return 0, false
	}
	var exLo, exHi int64 // repeated wall times, [exLo, exHi)
	if s.fixed && sp.start > minInstant && sp.prevOff > o {
		exLo = max(sp.start+o, sp.prevStart+sp.prevOff)
		exHi = sp.start + sp.prevOff
	}
	w := ceilMinute(from + o)
	for {
		wall, ok := s.nextWall(w, hi+o-1)
		if !ok {
			return 0, false
		}
		if wall >= exLo && wall < exHi {
			w = ceilMinute(exHi)
			continue
		}
		return wall - o, true
	}
}

// Next returns the first tick strictly after t, in UTC. It returns the zero
// Time only for t tens of millions of years away from today.
func (s *Schedule) Next(t time.Time) time.Time {
	if t.After(maxSupported) {
		return time.Time{}
	}
	if t.Before(minSupported) {
		t = minSupported
	}
	it := ticker{s: s}
	// Ticks are whole seconds, so the first one after t is the first one at
	// or after t's second plus one, whatever t's fraction.
	u, ok := it.atOrAfter(t.Unix() + 1)
	if !ok {
		return time.Time{}
	}
	return time.Unix(u, 0).UTC()
}

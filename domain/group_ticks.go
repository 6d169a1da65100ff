package domain

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/backfillsvc/backfill/schedule"
)

// Span is a data interval, [Start, End).
type Span struct{ Start, End time.Time }

// maxTickLine bounds the ticks a line holds: a minute schedule followed across a long window
// with a long lookback is refused rather than held in memory.
const maxTickLine = 4_000_000

// errTickLineTooLong is the error of a line past maxTickLine.
var errTickLineTooLong = errors.New("too many schedule ticks to follow the dependencies")

// tickLine is a schedule's ended ticks over a range that grows, into the past or the future,
// as lookbacks and overlaps ask for ticks beyond it.
type tickLine struct {
	sched    *schedule.Schedule
	now      time.Time
	ticks    []schedule.Slot // ascending
	from, to time.Time       // the ticks are every tick in [from, to]
	longest  time.Duration   // the longest interval of the ticks held
}

// add takes in ticks found by an extension, keeping longest.
func (l *tickLine) add(more []schedule.Slot) {
	for _, t := range more {
		l.longest = max(l.longest, t.IntervalEnd.Sub(t.LogicalDate))
	}
}

func newTickLine(sched *schedule.Schedule, from, to, now time.Time) (*tickLine, error) {
	l := &tickLine{sched: sched, now: now, from: from, to: from.Add(-time.Nanosecond)}
	return l, l.coverTo(to)
}

// step is how far one extension reaches: the range covered so far, at least a day.
func (l *tickLine) step() time.Duration { return max(l.to.Sub(l.from), 24*time.Hour) }

// coverFrom extends the line into the past until it covers t.
func (l *tickLine) coverFrom(t time.Time) error {
	for l.from.After(t) {
		from := l.from.Add(-l.step())
		more, err := l.sched.Slots(from, l.from.Add(-time.Nanosecond), l.now, maxTickLine)
		if err != nil {
			return fmt.Errorf("%w: %w", errTickLineTooLong, err)
		}
		l.add(more)
		l.ticks = append(more, l.ticks...)
		l.from = from
		if len(l.ticks) > maxTickLine {
			return errTickLineTooLong
		}
		if len(more) == 0 && from.Before(t) {
			return nil
		}
	}
	return nil
}

// coverTo extends the line into the future until it covers t (or now: later ticks have not
// ended).
func (l *tickLine) coverTo(t time.Time) error {
	t = minTime(t, l.now)
	for l.to.Before(t) {
		to := minTime(l.to.Add(l.step()), l.now)
		more, err := l.sched.Slots(l.to.Add(time.Nanosecond), to, l.now, maxTickLine)
		if err != nil {
			return fmt.Errorf("%w: %w", errTickLineTooLong, err)
		}
		l.add(more)
		l.ticks = append(l.ticks, more...)
		l.to = to
		if len(l.ticks) > maxTickLine {
			return errTickLineTooLong
		}
	}
	return nil
}

// back answers the start of the nth tick before start (start itself for n = 0): a data
// interval widened by a lookback of n of the schedule's intervals. When the schedule has fewer
// ticks before start, the earliest one.
func (l *tickLine) back(start time.Time, n int) (time.Time, error) {
	if n == 0 {
		return start, nil
	}
	for {
		i := sort.Search(len(l.ticks), func(i int) bool { return !l.ticks[i].LogicalDate.Before(start) })
		if i >= n {
			return l.ticks[i-n].LogicalDate, nil
		}
		before := len(l.ticks)
		if err := l.coverFrom(l.from.Add(-l.step())); err != nil {
			return time.Time{}, err
		}
		if len(l.ticks) == before { // no tick earlier: the schedule starts here
			if len(l.ticks) == 0 {
				return start, nil
			}
			return minTime(l.ticks[0].LogicalDate, start), nil
		}
	}
}

// hull answers the span from the first to the last tick whose interval overlaps w; ok is false
// when none does.
func (l *tickLine) hull(w Span) (Span, bool, error) {
	if err := l.coverFrom(w.Start.Add(-l.reach())); err != nil {
		return Span{}, false, err
	}
	if err := l.coverTo(w.End); err != nil {
		return Span{}, false, err
	}
	i := sort.Search(len(l.ticks), func(i int) bool { return l.ticks[i].IntervalEnd.After(w.Start) })
	j := sort.Search(len(l.ticks), func(i int) bool { return !l.ticks[i].LogicalDate.Before(w.End) }) - 1
	if i > j || i >= len(l.ticks) || j < 0 {
		return Span{}, false, nil
	}
	return Span{Start: l.ticks[i].LogicalDate, End: l.ticks[j].IntervalEnd}, true, nil
}

// reach is how far before an instant the tick that contains it may start: the longest
// interval held, a day when the line holds none yet.
func (l *tickLine) reach() time.Duration {
	if l.longest == 0 {
		return 24 * time.Hour
	}
	return l.longest
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

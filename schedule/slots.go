package schedule

import (
	"fmt"
	"time"
)

// Slot is one tick of a backfill window: its logical date and the end of its
// data interval (the next tick).
type Slot struct {
	LogicalDate time.Time // UTC
	IntervalEnd time.Time // UTC; = Next(LogicalDate)
}

// maxPrealloc caps the up-front allocation: the capacity estimate can be far
// too high for irregular schedules (`0,1 0 * * *` looks every-minute from its
// first two ticks), and append copes with the rare larger result.
const maxPrealloc = 1 << 17

// Slots returns the ticks t with from <= t <= to whose interval has ended
// (Next(t) <= now), ascending, all in UTC. If more than max would be returned
// it returns nil and a *TooManySlotsError (which is ErrTooManySlots), having
// listed no more than max slots and counted at most CountBeyond more, so that
// the error can say how many the window holds. A window with from after to has
// no slots. A max below zero is treated as zero.
func (s *Schedule) Slots(from, to, now time.Time, max int) ([]Slot, error) {
	if from.After(to) {
		return []Slot{}, nil
	}
	lo := ceilUnix(from)
	last := min(floorUnix(to), floorUnix(now)) // bound for ticks, as the next tick is later still
	endBound := floorUnix(now)                 // bound for interval ends

	it := ticker{s: s}
	tick, ok := it.atOrAfter(lo)
	if !ok || tick > last {
		return []Slot{}, nil
	}
	next, ok := it.atOrAfter(tick + 1)
	if !ok || next > endBound {
		return []Slot{}, nil
	}

	if max < 0 {
		max = 0
	}
	lastTo := floorUnix(to)
	// tooMany counts on from (tick, next), the first slot over max, without listing.
	tooMany := func(counted int) error {
		limit := max + CountBeyond
		if limit < max { // overflow
			limit = max
		}
		for {
			if counted >= limit {
				return &TooManySlotsError{Max: max, Count: counted}
			}
			counted++
			tick = next
			if tick > lastTo {
				break
			}
			if next, ok = it.atOrAfter(tick + 1); !ok || next > endBound {
				break
			}
		}
		return &TooManySlotsError{Max: max, Count: counted, Exact: true}
	}
	if max == 0 {
		return nil, tooMany(0)
	}
	// The first interval is a good guess at the spacing of the rest.
	est := min((last-tick)/(next-tick)+1, maxPrealloc)
	if int64(max) < est {
		est = int64(max)
	}
	slots := make([]Slot, 0, int(est))
	for {
		if len(slots) >= max {
			return nil, tooMany(len(slots))
		}
		slots = append(slots, Slot{
			LogicalDate: time.Unix(tick, 0).UTC(),
			IntervalEnd: time.Unix(next, 0).UTC(),
		})
		tick = next
		if tick > lastTo {
			break
		}
		if next, ok = it.atOrAfter(tick + 1); !ok || next > endBound {
			break
		}
	}
	return slots, nil
}

// floorUnix and ceilUnix convert to whole seconds, clamped to the supported
// range; ticks are whole seconds, so this loses nothing.
func floorUnix(t time.Time) int64 {
	switch {
	case t.Before(minSupported):
		return -supportedAbs
	case t.After(maxSupported):
		return supportedAbs
	}
	return t.Unix()
}

func ceilUnix(t time.Time) int64 {
	u := floorUnix(t)
	if t.Nanosecond() != 0 && u < supportedAbs && u > -supportedAbs {
		u++
	}
	return u
}

// CountBeyond bounds the ticks Slots counts past its max to say how many a window holds:
// about 100-250 ms of counting at worst, so that a window of decades of minutes costs a
// bounded amount to refuse.
const CountBeyond = 1_000_000

// TooManySlotsError is Slots' error when a window holds more than Max slots: it holds Count
// of them if Exact, else more than Count (counting stopped at Max + CountBeyond).
type TooManySlotsError struct {
	Max   int
	Count int
	Exact bool
}

func (e *TooManySlotsError) Error() string {
	if e.Exact {
		return fmt.Sprintf("%v: the window has %d slots, more than %d", ErrTooManySlots, e.Count, e.Max)
	}
	return fmt.Sprintf("%v: the window has more than %d slots, more than %d", ErrTooManySlots, e.Count, e.Max)
}

// Is makes the error ErrTooManySlots for errors.Is.
func (e *TooManySlotsError) Is(target error) bool { return target == ErrTooManySlots }

// IsTick reports whether t is a tick of the schedule: ticks are whole seconds, and the first
// tick at or after t's second is t itself.
func (s *Schedule) IsTick(t time.Time) bool {
	return t.Nanosecond() == 0 && s.Next(t.Add(-time.Second)).Equal(t)
}

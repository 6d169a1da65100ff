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
// it returns nil and an error wrapping ErrTooManySlots, having computed no
// more than max+1 slots. A window with from after to has no slots. A max below
// zero is treated as zero.
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

	if max <= 0 {
		return nil, fmt.Errorf("%w: the window has more than %d", ErrTooManySlots, max)
	}
	// The first interval is a good guess at the spacing of the rest.
	est := min((last-tick)/(next-tick)+1, maxPrealloc)
	if int64(max) < est {
		est = int64(max)
	}
	slots := make([]Slot, 0, int(est))
	lastTo := floorUnix(to)
	for {
		if len(slots) >= max {
			return nil, fmt.Errorf("%w: the window has more than %d", ErrTooManySlots, max)
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

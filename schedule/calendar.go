package schedule

import "math/bits"

// Wall times are handled as "wall seconds": the local clock reading counted
// like a Unix time, as if the clock were UTC. Matching on them is plain integer
// calendar arithmetic, with no time zone lookups and no time.Date
// normalisation, so DST is dealt with in exactly one place (ticks.go).

const (
	secondsPerDay  = 86400
	secondsPerHour = 3600
)

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// ceilMinute rounds wall seconds up to a whole minute, the finest cron
// granularity.
func ceilMinute(w int64) int64 { return ceilDiv(w, 60) * 60 }

// civilFromDays converts days since 1970-01-01 to a proleptic Gregorian date
// (Howard Hinnant's algorithm), valid far beyond any supported instant.
func civilFromDays(z int64) (y int64, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

// daysIn returns the length of month m of year y.
func daysIn(y int64, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// weekday returns 0 for Sunday; 1970-01-01 was a Thursday.
func weekday(days int64) int {
	return int(((days+4)%7 + 7) % 7)
}

// nextBit returns the lowest set bit of mask at or above from, or 64.
func nextBit(mask uint64, from int) int {
	if from >= 64 {
		return 64
	}
	return bits.TrailingZeros64(mask & (^uint64(0) << uint(from)))
}

func (s *Schedule) dayMatches(d, wd int) bool {
	domMatch := s.dom&(1<<uint(d)) != 0
	dowMatch := s.dow&(1<<uint(wd)) != 0
	if s.domStar || s.dowStar {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// nextWall returns the first matching wall time at or after w (which must be a
// whole minute) and not after maxW. It walks whole days and months at a time,
// so rare schedules cost a few thousand cheap steps at worst.
func (s *Schedule) nextWall(w, maxW int64) (int64, bool) {
	days := floorDiv(w, secondsPerDay)
	sod := w - days*secondsPerDay
	h, mi := int(sod/secondsPerHour), int(sod%secondsPerHour/60)
	y, m, d := civilFromDays(days)
	wd := weekday(days)

	// nextDay moves to midnight of the following day.
	nextDay := func() {
		days++
		wd = (wd + 1) % 7
		h, mi = 0, 0
		if d++; d > daysIn(y, m) {
			d = 1
			if m++; m > 12 {
				m, y = 1, y+1
			}
		}
	}

	for days*secondsPerDay <= maxW {
		if s.month&(1<<uint(m)) == 0 {
			skip := daysIn(y, m) - d + 1
			days += int64(skip)
			wd = (wd + skip) % 7
			h, mi, d = 0, 0, 1
			if m++; m > 12 {
				m, y = 1, y+1
			}
			continue
		}
		if !s.dayMatches(d, wd) {
			nextDay()
			continue
		}
		hh := nextBit(s.hour, h)
		if hh >= 24 {
			nextDay()
			continue
		}
		if hh != h {
			mi = 0
		}
		mm := nextBit(s.minute, mi)
		if mm >= 60 {
			if hh == 23 {
				nextDay()
			} else {
				h, mi = hh+1, 0
			}
			continue
		}
		wall := days*secondsPerDay + int64(hh)*secondsPerHour + int64(mm)*60
		if wall > maxW {
			return 0, false
		}
		return wall, true
	}
	return 0, false
}

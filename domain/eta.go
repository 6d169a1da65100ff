package domain

import (
	"math"
	"time"
)

// The ETA's window (contract: "One ETA"): the pace of a backfill's successes since its pace
// last restarted (pace_since: creation, a pause or unpause, a change of max_active_runs or
// pool), over at most the last PaceWindow, at most the newest PaceMaxSuccesses. The report's
// counter trigger counts successes in buckets of PaceBucket aligned to pace_since
// (migrations/00034, eta_record); ETA reads them.
const (
	PaceBucket       = 15 * time.Second
	PaceWindow       = 5 * time.Minute
	PaceMaxSuccesses = 500
)

// Pace is a backfill's successes as its row counts them.
type Pace struct {
	// Since is pace_since.
	Since time.Time
	// Last is the newest bucket's start (eta_last); nil before the first success.
	Last *time.Time
	// Buckets are the successes per bucket, oldest first (eta_buckets), the last starting
	// at Last.
	Buckets []int64
}

// ETA is eta_seconds at now: the seconds until no run is left queued or running at the
// window's pace, rounded to a tenth. Nil while the backfill is not running and until 2
// successes in the window give a pace; 0 once nothing is left. Buckets are counted whole and
// the span runs from the start of the oldest counted (or from the window's start, when that
// is later), so count and span always match.
func ETA(state BackfillState, left int64, p Pace, now time.Time) *float64 {
	if state != BackfillRunning {
		return nil
	}
	if left == 0 {
		zero := 0.0
		return &zero
	}
	if p.Last == nil || len(p.Buckets) == 0 || p.Last.Before(p.Since) {
		return nil // no success since the pace restarted
	}
	windowStart := p.Since
	if w := now.Add(-PaceWindow); w.After(windowStart) {
		windowStart = w
	}
	spanFrom := windowStart
	var n int64
	for i := len(p.Buckets) - 1; i >= 0; i-- {
		bucketStart := p.Last.Add(-PaceBucket * time.Duration(len(p.Buckets)-1-i))
		if !bucketStart.Add(PaceBucket).After(windowStart) {
			break
		}
		n += p.Buckets[i]
		if bucketStart.Before(spanFrom) {
			spanFrom = bucketStart
		}
		if n >= PaceMaxSuccesses {
			spanFrom = bucketStart
			break
		}
	}
	span := now.Sub(spanFrom).Seconds()
	if n < 2 || span <= 0 {
		return nil
	}
	eta := math.Round(float64(left)*span/float64(n)*10) / 10
	return &eta
}

package domain

import (
	"testing"
	"time"
)

func TestETAOfAPace(t *testing.T) {
	since := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return since.Add(time.Duration(s * float64(time.Second))) }
	last := func(s float64) *time.Time { v := at(s); return &v }
	for _, c := range []struct {
		name  string
		state BackfillState
		left  int64
		pace  Pace
		now   time.Time
		want  *float64
	}{
		{"not running", BackfillPaused, 10, Pace{Since: since, Last: last(0), Buckets: []int64{5}}, at(10), nil},
		{"nothing left", BackfillRunning, 0, Pace{Since: since}, at(10), ptr(0)},
		{"no success yet", BackfillRunning, 10, Pace{Since: since}, at(10), nil},
		{"one success is no pace", BackfillRunning, 10, Pace{Since: since, Last: last(0), Buckets: []int64{1}}, at(10), nil},
		// 4 successes in 20 s since the pace restarted: 5 s each, 10 left.
		{"since the restart", BackfillRunning, 10, Pace{Since: since, Last: last(15), Buckets: []int64{2, 2}}, at(20), ptr(50)},
		// Buckets from before the restart are never read.
		{"from before a restart", BackfillRunning, 10, Pace{Since: at(100), Last: last(90), Buckets: []int64{9}}, at(120), nil},
		// 10 minutes in: the window is the last 5 (from 300 s); the bucket holding 300 s
		// starts at 300 s, so 20 buckets of 1 count: 20 successes in 300 s.
		{"the last five minutes", BackfillRunning, 10, Pace{Since: since, Last: last(585), Buckets: ones(21)}, at(600), ptr(150)},
		// The window starts inside a bucket (at 307 s, in the bucket from 300 s): counted
		// whole, with its start: 21 successes in 307 s.
		{"a bucket counted whole", BackfillRunning, 10, Pace{Since: since, Last: last(600), Buckets: ones(21)}, at(607), ptr(146.2)},
		// 600 successes in the newest bucket alone: the span is that bucket's.
		{"the newest 500", BackfillRunning, 100, Pace{Since: since, Last: last(585), Buckets: append(ones(20), 600)}, at(600), ptr(2.5)},
	} {
		got := ETA(c.state, c.left, c.pace, c.now)
		switch {
		case got == nil && c.want == nil:
		case got == nil || c.want == nil || *got != *c.want:
			t.Errorf("%s: ETA %v, want %v", c.name, show(got), show(c.want))
		}
	}
}

func ptr(f float64) *float64 { return &f }

func ones(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func show(f *float64) any {
	if f == nil {
		return "nil"
	}
	return *f
}

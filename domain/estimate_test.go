package domain

import "testing"

func TestEstimateOfRunsInWaves(t *testing.T) {
	for _, c := range []struct {
		runs, conc        int
		p50, runner, wall float64
	}{
		{10, 2, 1, 10, 5},
		{3, 2, 2, 6, 4},
		{0, 4, 1.5, 0, 0},
		{5, 0, 1, 5, 5}, // a concurrency below 1 is taken as 1
	} {
		e := EstimateOf(c.runs, c.p50, 20, c.conc)
		if e.RunnerSeconds != c.runner || e.WallClockSeconds != c.wall {
			t.Errorf("EstimateOf(%d, %v, 20, %d) = %v runner, %v wall; want %v, %v",
				c.runs, c.p50, c.conc, e.RunnerSeconds, e.WallClockSeconds, c.runner, c.wall)
		}
	}
}

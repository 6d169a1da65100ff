package domain

import "math"

// Why a dry run's estimate is what it is (estimate_basis).
const (
	// EstimateFromSuccessfulRuns: the estimate is the p50 of the DAG's last successful runs.
	EstimateFromSuccessfulRuns = "last_successful_runs"
	// EstimateNoSuccessfulRuns: the DAG has no successful run with a start and an end to
	// measure, so there is no estimate.
	EstimateNoSuccessfulRuns = "no_successful_runs"
)

// EstimateSampleRuns is how many of the DAG's latest successful runs the estimate reads.
const EstimateSampleRuns = 20

// Estimate is what a backfill would cost, from how long the DAG's runs took.
type Estimate struct {
	// Runs are the runs the backfill would start (created or reprocessed slots).
	Runs int
	// P50RunSeconds is the median duration of the sample.
	P50RunSeconds float64
	// SampleRuns is how many successful runs the median is of (1..EstimateSampleRuns).
	SampleRuns int
	// Concurrency is how many runs may run at once: max_active_runs, or the pool's slots
	// when fewer.
	Concurrency int
	// RunnerSeconds is the work: P50RunSeconds × Runs.
	RunnerSeconds float64
	// WallClockSeconds is the time at Concurrency: the runs in waves of Concurrency, each
	// wave as long as one run.
	WallClockSeconds float64
}

// EstimateOf computes an estimate of runs runs of median p50 seconds at most concurrency at
// once. Waves, not runner-seconds ÷ concurrency: 3 runs at concurrency 2 take two runs' time.
func EstimateOf(runs int, p50 float64, sample, concurrency int) Estimate {
	concurrency = max(concurrency, 1)
	waves := (runs + concurrency - 1) / concurrency
	return Estimate{
		Runs:             runs,
		P50RunSeconds:    p50,
		SampleRuns:       sample,
		Concurrency:      concurrency,
		RunnerSeconds:    round3(p50 * float64(runs)),
		WallClockSeconds: round3(p50 * float64(waves)),
	}
}

// round3 rounds to the millisecond: finer digits are noise of the sample.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

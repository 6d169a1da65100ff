package tests

import (
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// Without a successful run to measure, the dry run has no estimate and says why.
func TestDryRunEstimateIsNullWithoutHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("est_none", "@daily", "")
	d, _ := e.DryRun(backfillBody("est_none", day(1, 1), day(1, 10)))
	require.Nil(t, d.Estimate)
	require.Equal(t, api.DryRunCollectionEstimateBasis("no_successful_runs"), d.EstimateBasis)

	// Runs marked success without running have no duration: still nothing to measure.
	e.SucceededManualRuns("est_none", day(2, 1), day(2, 2))
	d, _ = e.DryRun(backfillBody("est_none", day(1, 1), day(1, 10)))
	require.Nil(t, d.Estimate)
	require.Equal(t, api.DryRunCollectionEstimateBasis("no_successful_runs"), d.EstimateBasis)
}

// Runs that took about a second: 10 runs are 10 runner-seconds, and 5 s of wall clock at
// concurrency 2 (max_active_runs) or at a pool's 2 slots.
func TestDryRunEstimateFromLastSuccessfulRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("est", day(3, 1), day(3, 3), "max_active_runs", 3)
	runs := e.ClaimDag("w", "est", 3)
	require.Len(t, runs, 3)
	e.Clock.Advance(time.Second)
	for _, r := range runs {
		e.Report(r, "success")
	}
	e.SweepOnce()
	require.Equal(t, api.BackfillStateSucceeded, e.GetBackfill(b.Id).State)

	d, _ := e.DryRun(backfillBody("est", day(1, 1), day(1, 10), "max_active_runs", 2))
	require.Equal(t, api.DryRunCollectionEstimateBasis("last_successful_runs"), d.EstimateBasis)
	require.NotNil(t, d.Estimate)
	require.EqualValues(t, 10, d.Estimate.Runs)
	require.EqualValues(t, 3, d.Estimate.SampleRuns)
	require.EqualValues(t, 2, d.Estimate.Concurrency)
	require.InDelta(t, 1, d.Estimate.P50RunSeconds, 0.01)
	require.InDelta(t, 10, d.Estimate.RunnerSeconds, 0.1)
	require.InDelta(t, 5, d.Estimate.WallClockSeconds, 0.05)

	// A pool with fewer slots than max_active_runs bounds the concurrency.
	e.PutPool("est_pool", 2, 201)
	d, _ = e.DryRun(backfillBody("est", day(1, 1), day(1, 10), "max_active_runs", 8, "pool", "est_pool"))
	require.EqualValues(t, 2, d.Estimate.Concurrency)
	require.InDelta(t, 5, d.Estimate.WallClockSeconds, 0.05)

	// Skipped slots cost nothing: the three March days exist and are not reprocessed.
	d, _ = e.DryRun(backfillBody("est", day(3, 1), day(3, 4), "max_active_runs", 2))
	require.EqualValues(t, 1, d.Estimate.Runs)
	require.InDelta(t, 1, d.Estimate.WallClockSeconds, 0.05)
}

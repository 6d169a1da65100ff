package tests

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// A stopped SDK executor hands its unfinished runs back at once (queued, same attempt); a
// failing work function's error becomes the run's note; the SDK's operator calls work end to
// end against the real service.
func TestSDKExecutorReleasesOnStopAndNotesFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.sdk(t)
	ctx := context.Background()
	sdkDailyDag(t, c, "sdk_release")
	d, err := c.DryRunBackfill(ctx, client.BackfillCreate{DagId: "sdk_release", FromDate: day(1, 1), ToDate: day(1, 4)})
	require.NoError(t, err)
	b, err := c.CreateBackfill(ctx, client.BackfillCreate{DagId: "sdk_release", FromDate: day(1, 1), ToDate: day(1, 4),
		MaxActiveRuns: sdkPtr[int32](2)}, client.CreateOptions{IfPlan: d.PlanHash})
	require.NoError(t, err)
	require.Equal(t, d.PlanHash, *b.PlanHash)

	xctx, stop := context.WithCancel(ctx)
	var started sync.WaitGroup
	started.Add(2)
	done := make(chan error, 1)
	go func() {
		done <- c.RunExecutor(xctx, client.ExecutorConfig{WorkerID: "stopping", Limit: 2, IdleBackoff: time.Millisecond},
			func(ctx context.Context, run client.DagRun) error {
				started.Done()
				<-ctx.Done()
				return ctx.Err()
			})
	}()
	started.Wait()
	stop()
	require.NoError(t, <-done)
	got, err := c.GetBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.EqualValues(t, 0, got.Progress.Running, "the stopped executor's runs were not handed back")
	require.EqualValues(t, 4, got.Progress.Queued)

	// The next executor gets them at once, attempt 1, and fails them with a reason.
	_, err = c.PatchBackfill(ctx, b.Id, client.BackfillChanges{MaxFailedRuns: client.Set[int32](1), Description: client.Set("stop at the first failure")})
	require.NoError(t, err)
	runSDKExecutors(t, c, 1, sdkFastExecutor, func(ctx context.Context, run client.DagRun) error {
		if run.Attempt != 1 {
			return errors.New("attempt changed by a release")
		}
		return errors.New("warehouse unreachable")
	})
	require.Eventually(t, func() bool {
		got, err := c.GetBackfill(ctx, b.Id)
		return err == nil && got.State == client.BackfillStatePaused
	}, time.Minute, 10*time.Millisecond, "the budget of 1 failure did not pause the backfill")
	got, err = c.GetBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.Equal(t, client.BackfillPauseReasonFailureBudget, *got.PauseReason)
	require.Equal(t, "stop at the first failure", *got.Description)
	runs, err := c.Raw.ListDagRunsWithResponse(ctx, "sdk_release", &client.ListDagRunsParams{State: sdkPtr(client.DagRunStateFailed)})
	require.NoError(t, err)
	require.NotEmpty(t, runs.JSON200.DagRuns)
	for _, r := range runs.JSON200.DagRuns {
		require.Equal(t, "warehouse unreachable", *r.Note)
		require.EqualValues(t, 1, r.Attempt)
	}
}

package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A work function that returns Defer (wrapped or not) has its run reported deferred, with
// the wait in whole seconds (rounded up, within the service's 1 s..24 h) and its note.
func TestRunExecutorReportsDeferWithRetryAfter(t *testing.T) {
	t.Parallel()
	f := newFakeExecutorAPI(run(1, "later"), run(2, "tiny"), run(3, "huge"))
	c := serve(t, f.handler(), "")
	outcomes := make(chan RunOutcome, 3)
	stop := startExecutor(t, c, ExecutorConfig{WorkerID: "w1", Limit: 3, IdleBackoff: time.Millisecond,
		OnRunEnd: func(_ DagRun, o RunOutcome, _ string) { outcomes <- o }},
		func(ctx context.Context, r DagRun) error {
			switch r.RunId {
			case "later":
				return fmt.Errorf("load: %w", Defer(90500*time.Millisecond, "429 from the API"))
			case "tiny":
				return Defer(time.Millisecond, "")
			}
			return Defer(48*time.Hour, "")
		})
	for range 3 {
		awaitReport(t, f)
		require.Equal(t, OutcomeDeferred, <-outcomes)
	}
	require.NoError(t, stop())
	for runID, secs := range map[string]int64{"later": 91, "tiny": 1, "huge": 86400} {
		p, ok := f.report(runID)
		require.True(t, ok, runID)
		require.Equal(t, DagRunReportStateDeferred, p.State, runID)
		require.Equal(t, secs, *p.RetryAfterSeconds, runID)
	}
	later, _ := f.report("later")
	require.Equal(t, "429 from the API", *later.Note)
}

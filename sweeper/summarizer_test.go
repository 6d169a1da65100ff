package sweeper

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The summarizer calls the store every interval, goes on after a failure, and stops with
// Stop.
func TestSummarizerRunsEveryIntervalAndOutlivesFailures(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	s := NewSummarizer(func(ctx context.Context) (int, error) {
		if calls.Add(1) == 2 {
			return 0, errors.New("lock timeout")
		}
		return 1, nil
	}, 10*time.Millisecond, nil)
	require.NoError(t, s.Start(context.Background()))
	require.Eventually(t, func() bool { return calls.Load() >= 5 }, 5*time.Second, 5*time.Millisecond)
	s.Stop()
	after := calls.Load()
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, after, calls.Load(), "no call after Stop")
}

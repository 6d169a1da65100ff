package ctxwait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSleepWaitsTheFullTime(t *testing.T) {
	start := time.Now()
	require.True(t, Sleep(context.Background(), 20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	require.False(t, Sleep(ctx, time.Hour))
	require.Less(t, time.Since(start), time.Minute)
}

package client

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The margin is 1 s plus 1% of the lease.
func TestLeaseMarginGrowsWithTheLease(t *testing.T) {
	require.Equal(t, 1100*time.Millisecond, LeaseMargin(10))
	require.Equal(t, 1600*time.Millisecond, LeaseMargin(60))
	require.Equal(t, 37*time.Second, LeaseMargin(3600))
}

// A config whose work would be told to stop before one heartbeat could renew the lease is
// refused before anything is claimed.
func TestRunExecutorRefusesAStopGraceThatLeavesNoHeartbeat(t *testing.T) {
	t.Parallel()
	c := serve(t, http.NotFoundHandler(), "")
	err := c.RunExecutor(context.Background(), ExecutorConfig{
		WorkerID: "w1", LeaseSeconds: 10, HeartbeatEvery: 3 * time.Second, StopGrace: 6 * time.Second,
	}, nil)
	require.ErrorContains(t, err, "the heartbeat period (3s) + the stop grace (6s) + the lease margin (1.1s) must be shorter than the lease (10s)")
}

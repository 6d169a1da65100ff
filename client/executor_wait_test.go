package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The executor's claims wait on the service (20 s by default, at most 2 s until idle, none
// when asked), in whole seconds within the service's 30.
func TestExecutorClaimsWaitOnTheService(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  ExecutorConfig
		want *int
	}{
		{ExecutorConfig{WorkerID: "w"}, Ptr(20)},
		{ExecutorConfig{WorkerID: "w", UntilIdle: true}, Ptr(2)},
		{ExecutorConfig{WorkerID: "w", ClaimWait: time.Minute}, Ptr(30)},
		{ExecutorConfig{WorkerID: "w", ClaimWait: 1500 * time.Millisecond}, Ptr(1)},
		{ExecutorConfig{WorkerID: "w", ClaimWait: -1}, nil},
	} {
		cfg := c.cfg
		require.NoError(t, cfg.defaults())
		require.Equal(t, c.want, claimRequest(cfg, 1).WaitSeconds, "%+v", c.cfg)
	}
}

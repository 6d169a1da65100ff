// Package ctxwait waits for a while or for the end of a context, whichever comes first: the
// one wait of the SDK's loops, the CLI's polling and the handlers' backoffs.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d, or less when ctx ends first; it reports whether it waited the full d. The
// timer is stopped either way, so a wait cut short leaves nothing running.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

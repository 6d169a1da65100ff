package client

import (
	"context"
	"errors"
	"time"
)

// DefaultWaitInterval is WaitBackfill's polling interval when it is given none.
const DefaultWaitInterval = time.Second

// WaitBackfill polls a backfill every interval until its state is terminal (succeeded,
// failed or canceled) and answers it; that a backfill ended failed or canceled is not an
// error. onProgress, when not nil, sees every poll's backfill, the first and the last
// included, on the calling goroutine.
//
// The service finishes a backfill in its background sweep (every SWEEP_INTERVAL, 5s by
// default), so the terminal state can lag the last run's report by that much.
//
// A 503 (busy, unavailable) is waited out, honouring Retry-After; any other error ends
// the wait and is returned with the last backfill seen. When ctx is done the answer is the
// last backfill seen and ctx's error.
func (c *Client) WaitBackfill(ctx context.Context, id int64, interval time.Duration, onProgress func(Backfill)) (Backfill, error) {
	if interval <= 0 {
		interval = DefaultWaitInterval
	}
	var last Backfill
	for {
		b, err := c.GetBackfill(ctx, id)
		wait := interval
		switch {
		case err == nil:
			last = b
			if onProgress != nil {
				onProgress(b)
			}
			if b.State.Terminal() {
				return b, nil
			}
		case ctx.Err() != nil:
			return last, ctx.Err()
		default:
			var p *ProblemError
			if !errors.As(err, &p) || !p.Temporary() {
				return last, err
			}
			wait = max(wait, p.RetryAfter)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

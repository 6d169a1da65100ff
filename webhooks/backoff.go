package webhooks

import (
	"math/rand/v2"
	"time"
)

// Retry schedule. The first retry comes within 10 s; each delay is 4 times the one before,
// capped at 8 h; after maxAttempts attempts the delivery is given up. The delays before
// the last attempt add up to about 31.6 h, over the contract's 24 h even with the jitter
// taking 10 % off every delay (28.4 h).
const (
	firstRetryDelay = 5 * time.Second
	retryGrowth     = 4
	maxRetryDelay   = 8 * time.Hour
	maxAttempts     = 11
)

// retryDelay is how long after failed attempt number attempt (1-based) the next one is due,
// or false when that was the last attempt. Each delay is drawn within ±10 % so that a burst
// of failures against one receiver spreads out instead of coming back together.
func retryDelay(attempt int) (time.Duration, bool) {
	if attempt >= maxAttempts {
		return 0, false
	}
	d := firstRetryDelay
	for i := 1; i < attempt && d < maxRetryDelay; i++ {
		d *= retryGrowth
	}
	d = min(d, maxRetryDelay)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return d + jitter, true
}

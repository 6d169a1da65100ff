package client

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/backfillsvc/backfill/internal/ctxwait"
)

// RetryPolicy says how the helpers that create something (CreateBackfill, RetryBackfill,
// ClaimRuns, CreateWebhook, CreateDagRun) retry. Each sends an Idempotency-Key (a random one
// when the caller gives none) and sends the same request with the same key again after a
// 503 (busy, timeout, unavailable, outcome_unknown) or a network error: the service then
// answers what the first attempt did, if it was applied, so the change happens at most once.
type RetryPolicy struct {
	// Attempts bounds the tries of one call, the first included (1: no retry).
	Attempts int
	// Base is the first wait; it doubles, with jitter, up to Max. A 503's Retry-After is
	// honoured up to Max.
	Base, Max time.Duration
}

// DefaultRetry is the policy of a Client whose Retry is zero: about 20 s of retries.
var DefaultRetry = RetryPolicy{Attempts: 10, Base: 100 * time.Millisecond, Max: 5 * time.Second}

func (c *Client) retryPolicy() RetryPolicy {
	p := c.Retry
	if p.Attempts <= 0 {
		p.Attempts = DefaultRetry.Attempts
	}
	if p.Base <= 0 {
		p.Base = DefaultRetry.Base
	}
	if p.Max < p.Base {
		p.Max = max(p.Base, DefaultRetry.Max)
	}
	return p
}

// NewIdempotencyKey returns a fresh random key (26 base32 characters, at least 128 bits of
// randomness), as the helpers send when their caller gives none.
func NewIdempotencyKey() string {
	return rand.Text()
}

// keyOr returns key, or a fresh one when it is empty.
func keyOr(key string) string {
	if key == "" {
		return NewIdempotencyKey()
	}
	return key
}

// Retryable reports whether a call that failed with err may succeed when sent again
// unchanged (with the same Idempotency-Key, where it takes one): a 503 or another temporary
// 5xx, or a failure of the network or of the HTTP round trip. Errors of the caller's own
// context are not.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var p *ProblemError
	if errors.As(err, &p) {
		return p.Temporary()
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// withRetry runs call until it succeeds, fails for good, runs out of the policy's attempts
// or ctx ends; it answers the last result.
func withRetry[T any](ctx context.Context, c *Client, call func() (T, error)) (T, error) {
	p := c.retryPolicy()
	wait := p.Base
	for attempt := 1; ; attempt++ {
		v, err := call()
		if err == nil || attempt >= p.Attempts || ctx.Err() != nil || !Retryable(err) {
			return v, err
		}
		d := jitter(wait)
		var pe *ProblemError
		if errors.As(err, &pe) && pe.RetryAfter > d {
			d = pe.RetryAfter
		}
		if !ctxwait.Sleep(ctx, min(d, p.Max)) {
			return v, err
		}
		wait = min(wait*2, p.Max)
	}
}

// Package startstop gives a background service its Start and Stop once, so that every service
// has the same lifecycle: Start spawns one goroutine, Stop cancels it and waits for it to exit.
package startstop

import (
	"context"
	"sync"
)

// Base is embedded by a service, which calls Init from its constructor. Its methods are safe
// for concurrent use:
//
//   - Start spawns the service's goroutine. A Start while the goroutine runs is a no-op that
//     returns nil, so that a service started twice by mistake still runs one loop.
//   - Stop cancels the goroutine's context and waits for it to exit. It is idempotent and safe
//     before Start; concurrent Stops all return only once the goroutine has exited.
//   - Start after Stop (or after the goroutine returned by itself) starts a new goroutine. It
//     never overlaps the old one: Stop holds the lock until the old one has exited.
type Base struct {
	run     func(ctx context.Context)
	prepare func(ctx context.Context) error

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has exited; nil when never started or stopped
}

// Init sets what Start runs: prepare (may be nil) in the caller's goroutine, whose error is
// Start's and aborts it, then run in a new goroutine until its context is cancelled. prepare
// happens before run, so that run may read what prepare wrote without a lock.
func (b *Base) Init(run func(ctx context.Context), prepare func(ctx context.Context) error) {
	b.run, b.prepare = run, prepare
}

// Start spawns the goroutine with a context derived from ctx (cancelling ctx ends it too),
// unless it is already running. It returns only prepare's error.
func (b *Base) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		select {
		case <-b.done:
			b.cancel() // ended by itself (ctx cancelled): release it and start anew
		default:
			return nil
		}
	}
	if b.prepare != nil {
		if err := b.prepare(ctx); err != nil {
			b.cancel, b.done = nil, nil
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		b.run(ctx)
	}()
	return nil
}

// Stop cancels the goroutine and waits for it to exit. It holds the lock while waiting, so a
// concurrent Start waits too and never runs a second goroutine beside the exiting one; run
// must therefore never call Start or Stop itself.
func (b *Base) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return
	}
	b.cancel()
	<-b.done
	b.cancel, b.done = nil, nil
}

// Running reports whether the goroutine is running (started and not yet exited).
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// Package startstop gives a background service its Start and Stop once, so that every service
// has the same lifecycle: Start spawns one goroutine, Stop cancels it and waits for it to exit.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStop is the cause of a run's context when Stop ended it (context.Cause), which tells a
// controlled stop from the cancellation of the context Start was given.
var ErrStop = errors.New("service stopped")

// Base is embedded by a service, which calls Init from its constructor. Its methods are safe
// for concurrent use:
//
//   - Start spawns the service's goroutine. A Start while the goroutine runs is a no-op that
//     returns nil, so that a service started twice by mistake still runs one loop.
//   - Started is closed once the goroutine runs, so that a caller (a test) waits for
//     "running" instead of polling or sleeping.
//   - Stop cancels the goroutine's context with ErrStop and waits for it to exit. It is
//     idempotent and safe before Start; concurrent Stops all return only once the goroutine
//     has exited.
//   - Start after Stop (or after the goroutine returned by itself) starts a new goroutine. It
//     never overlaps the old one: Stop holds the lock until the old one has exited.
type Base struct {
	run     func(ctx context.Context)
	prepare func(ctx context.Context) error

	mu      sync.Mutex
	cur     *runState     // the running (or exited, not yet stopped) goroutine; nil when none
	last    *runState     // the goroutine that ran last, for StopCause
	started chan struct{} // closed when the goroutine runs; made early by Started
}

// runState is one goroutine of a Base: cause is written before done is closed and read only
// after, so it needs no lock.
type runState struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	cause  error
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
	if b.cur != nil {
		select {
		case <-b.cur.done:
			// Ended by itself (ctx cancelled): release it and start anew.
			b.cur.cancel(nil)
			b.cur, b.started = nil, nil
		default:
			return nil
		}
	}
	if b.prepare != nil {
		if err := b.prepare(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	r := &runState{cancel: cancel, done: make(chan struct{})}
	if b.started == nil {
		b.started = make(chan struct{})
	}
	started := b.started
	b.cur, b.last = r, r
	go func() {
		defer close(r.done)
		defer func() {
			if r.cause = context.Cause(ctx); r.cause == nil {
				r.cause = errReturned
			}
		}()
		close(started)
		b.run(ctx)
	}()
	return nil
}

// errReturned is the stop cause of a run that returned while its context was live.
var errReturned = errors.New("service returned by itself")

// Started returns a channel closed once the goroutine of the current (or, before Start, the
// next) Start runs.
func (b *Base) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started == nil {
		b.started = make(chan struct{})
	}
	return b.started
}

// Stop cancels the goroutine with ErrStop and waits for it to exit. It holds the lock while
// waiting, so a concurrent Start waits too and never runs a second goroutine beside the
// exiting one; run must therefore never call Start or Stop itself.
func (b *Base) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return
	}
	b.cur.cancel(ErrStop)
	<-b.cur.done
	b.cur, b.started = nil, nil
}

// StopCause reports why the last goroutine ended: ErrStop after Stop, the cause of the
// context Start was given when that ended it, or an error saying run returned by itself. It
// is nil while the goroutine runs and before the first Start.
func (b *Base) StopCause() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		return nil
	}
	select {
	case <-b.last.done:
		return b.last.cause
	default:
		return nil
	}
}

// Running reports whether the goroutine is running (started and not yet exited).
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return false
	}
	select {
	case <-b.cur.done:
		return false
	default:
		return true
	}
}

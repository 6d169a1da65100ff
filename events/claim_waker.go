package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/internal/startstop"
	"github.com/lib/pq"
)

// ClaimableChannel is the NOTIFY channel on which a replica tells every replica's ClaimWaker
// that something may have become claimable.
const ClaimableChannel = "backfill_claimable"

// ClaimWaker wakes the waiting claims of one replica (POST /runs/claim with wait_seconds):
// at once after a change made on this replica (Kick), and after a change on another replica
// through a LISTEN session on ClaimableChannel of its own. A waiting claim also polls (every
// second), which covers what no commit announces (a deferred run's time, a pace's next
// start) and a LISTEN that cannot be had, as behind a transaction pooler.
//
// A wake-up is a broadcast: every claim waiting then claims again, and those that find
// nothing wait again. Waiters take Wait's channel before they claim, so a change that
// commits between their claim and their wait still wakes them.
type ClaimWaker struct {
	startstop.Base
	dsn    string
	log    *slog.Logger
	notify func() // another replica's wake-up: the notifier's Kick; nil for none

	mu   sync.Mutex
	wake chan struct{}

	endOnce  sync.Once
	stopping chan struct{}
}

// NewClaimWaker returns a ClaimWaker that LISTENs on dsn (none when empty: waiters then
// rely on local kicks and their polling) once started, and calls notify (when not nil) on
// every Kick to tell the other replicas.
func NewClaimWaker(dsn string, notify func(), log *slog.Logger) *ClaimWaker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &ClaimWaker{dsn: dsn, log: log, notify: notify, wake: make(chan struct{}), stopping: make(chan struct{})}
	w.Init(w.loop, nil)
	return w
}

// Wait answers a channel that is closed at the next wake-up.
func (w *ClaimWaker) Wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wake
}

// EndWaits makes every waiting claim answer now with what it has (nothing), and every later
// one answer after its first claim: the server calls it as draining begins, so that a
// shutdown does not wait out claims that wait for work. It is idempotent.
func (w *ClaimWaker) EndWaits() { w.endOnce.Do(func() { close(w.stopping) }) }

// Stopping is closed once EndWaits was called.
func (w *ClaimWaker) Stopping() <-chan struct{} { return w.stopping }

// Kick wakes this replica's waiting claims now and, through the notifier, every other
// replica's. The store calls it after a change that may make runs claimable.
func (w *ClaimWaker) Kick() {
	w.broadcast()
	if w.notify != nil {
		w.notify()
	}
}

func (w *ClaimWaker) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.wake)
	w.wake = make(chan struct{})
}

// loop holds the LISTEN session and turns each notification into a broadcast. pq.Listener
// reconnects by itself; a notification lost meanwhile costs the waiters one poll. A
// reconnection broadcasts too, since changes may have committed while no one listened.
func (w *ClaimWaker) loop(ctx context.Context) {
	if w.dsn == "" {
		return
	}
	l := pq.NewListener(w.dsn, 100*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			w.log.Warn("claim waker: LISTEN connection; waiting claims poll until it is back", "event", int(ev), "err", err)
		}
	})
	defer func() { _ = l.Close() }()
	go func() {
		if err := l.Listen(ClaimableChannel); err != nil && ctx.Err() == nil {
			w.log.Warn("claim waker: LISTEN failed; waiting claims poll", "err", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.NotificationChannel():
			w.broadcast()
		}
	}
}

package events

import (
	"sync"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// maxPending bounds the events waiting for one slow stream. Beyond it the subscription drops
// them and says it lagged: the stream then reads what it missed from the outbox, so a slow
// client costs its own queries, never the hub's memory or another stream's delay.
const maxPending = 256

// Subscription is one stream's view of the hub.
type Subscription struct {
	hub        *Hub
	backfillID int64
	wake       chan struct{}

	mu       sync.Mutex
	pending  []domain.Event
	lagged   bool
	progress *Progress
	closed   bool
}

// Wake receives when there is something to Take.
func (s *Subscription) Wake() <-chan struct{} { return s.wake }

// Take answers what arrived since the last Take: events in id order (maybe already sent
// by the replay: drop ids at or below the last one sent), whether some were dropped (read
// them from the outbox), and the latest progress if it changed.
func (s *Subscription) Take() (evs []domain.Event, lagged bool, progress *Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, lagged, progress = s.pending, s.lagged, s.progress
	s.pending, s.lagged, s.progress = nil, false, nil
	return evs, lagged, progress
}

// Close ends the subscription; it is idempotent.
func (s *Subscription) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.hub.unsubscribe(s)
}

func (s *Subscription) push(ev domain.Event) {
	s.mu.Lock()
	if len(s.pending) >= maxPending {
		s.pending, s.lagged = nil, true
	} else if !s.lagged {
		s.pending = append(s.pending, ev)
	}
	s.mu.Unlock()
	s.signal()
}

// lag makes the stream read the outbox itself from the last event it sent, as if it had
// fallen behind: the hub read events of its backfill that it could not hand on.
func (s *Subscription) lag() {
	s.mu.Lock()
	s.pending, s.lagged = nil, true
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) setProgress(p Progress) {
	s.mu.Lock()
	s.progress = &p
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Progress is what a stream's `progress` message says.
type Progress struct {
	State  domain.BackfillState
	Counts repo.Progress
	ETA    *float64
}

// SameCounts reports whether nothing a progress message shows has changed, the estimate
// aside (it moves with the clock alone).
func (p Progress) SameCounts(q Progress) bool { return p.State == q.State && p.Counts == q.Counts }

// ProgressOf reads a backfill's progress at now (the database's clock). The estimate is the
// backfill's average pace since creation applied to the runs left: null before any run has
// finished and while the backfill is not running (paused or canceling), 0 once nothing is left.
func ProgressOf(b repo.Backfill, now time.Time) Progress {
	p := Progress{State: b.State, Counts: b.Progress}
	left := b.Queued + b.Running
	done := b.Success + b.Failed + b.Canceled
	elapsed := now.Sub(b.CreatedAt).Seconds()
	switch {
	case left == 0:
		zero := 0.0
		p.ETA = &zero
	case b.State != domain.BackfillRunning || done == 0 || elapsed <= 0:
	default:
		eta := float64(left) * elapsed / float64(done)
		eta = float64(int64(eta*10+0.5)) / 10
		p.ETA = &eta
	}
	return p
}

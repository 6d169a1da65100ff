package events

import (
	"sync"

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

// ProgressOf is a backfill's progress as read with its estimate (repo.BackfillProgressMany):
// the server's one eta_seconds (domain.ETA), the figure that
// GET /backfills/{id}, the console and `backfillctl watch` show.
func ProgressOf(b repo.Backfill) Progress {
	return Progress{State: b.State, Counts: b.Progress, ETA: b.ETA}
}

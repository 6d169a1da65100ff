package events

import (
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// A slow stream's subscription keeps at most maxPending events, then says it lagged (the
// stream re-reads the outbox) instead of growing or blocking the hub.
func TestSubscriptionLagsInsteadOfGrowing(t *testing.T) {
	h := New(nil, Config{MaxStreams: 1})
	s, err := h.Subscribe(7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Subscribe(8); err != ErrTooManyStreams {
		t.Fatalf("second stream: %v, want ErrTooManyStreams", err)
	}
	for i := range maxPending {
		s.push(domain.Event{ID: int64(i + 1)})
	}
	evs, lagged, _ := s.Take()
	if len(evs) != maxPending || lagged {
		t.Fatalf("took %d events, lagged %v; want %d, false", len(evs), lagged, maxPending)
	}
	for i := range maxPending + 1 {
		s.push(domain.Event{ID: int64(i + 1)})
	}
	s.push(domain.Event{ID: 1000})
	evs, lagged, _ = s.Take()
	if len(evs) != 0 || !lagged {
		t.Fatalf("took %d events, lagged %v; want 0, true", len(evs), lagged)
	}
	s.Close()
	s.Close()
	if _, err := h.Subscribe(8); err != nil {
		t.Fatalf("a closed stream frees its place: %v", err)
	}
	h.EndStreams()
	if _, err := h.Subscribe(9); err != ErrStopped {
		t.Fatalf("after EndStreams: %v, want ErrStopped", err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done is not closed after EndStreams")
	}
	h.Stop() // before Start: a no-op
}

func TestProgressEstimate(t *testing.T) {
	created := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	b := repo.Backfill{State: domain.BackfillRunning, CreatedAt: created,
		Progress: repo.Progress{Queued: 5, Running: 1, Success: 3, Failed: 1, Skipped: 2}}
	p := ProgressOf(b, created.Add(100*time.Second))
	if p.ETA == nil || *p.ETA != 150 {
		t.Fatalf("eta %v, want 150 (6 left at 25 s each)", p.ETA)
	}
	b.State = domain.BackfillPaused
	if p := ProgressOf(b, created.Add(time.Second)); p.ETA != nil {
		t.Fatalf("paused: eta %v, want none", *p.ETA)
	}
	b.State, b.Success, b.Failed = domain.BackfillRunning, 0, 0
	if p := ProgressOf(b, created.Add(time.Second)); p.ETA != nil {
		t.Fatalf("nothing finished: eta %v, want none", *p.ETA)
	}
	b.Queued, b.Running = 0, 0
	if p := ProgressOf(b, created); p.ETA == nil || *p.ETA != 0 {
		t.Fatalf("nothing left: eta %v, want 0", p.ETA)
	}
	if !ProgressOf(b, created).SameCounts(ProgressOf(b, created.Add(time.Hour))) {
		t.Fatal("the clock alone does not change the counts")
	}
}

package events

import (
	"testing"

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

func TestProgressCarriesTheServersEstimate(t *testing.T) {
	eta := 42.5
	b := repo.Backfill{State: domain.BackfillRunning, ETA: &eta,
		Progress: repo.Progress{Queued: 5, Running: 1, Success: 3, Failed: 1, Skipped: 2}}
	p := ProgressOf(b)
	if p.ETA == nil || *p.ETA != eta {
		t.Fatalf("eta %v, want the server's %v", p.ETA, eta)
	}
	other := 7.0
	b.ETA = &other
	if !p.SameCounts(ProgressOf(b)) {
		t.Fatal("the estimate alone does not change the counts")
	}
}

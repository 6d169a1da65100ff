package events

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// fakeOutbox is an outbox of events in id order, scanned rows at a time as repo.EventScan
// scans it, and one backfill's state.
type fakeOutbox struct {
	mu     sync.Mutex
	events []domain.Event
	state  domain.BackfillState
	// heldAbove, when not 0, holds back the events after it, as an older transaction does.
	heldAbove int64
}

func (o *fakeOutbox) EventScan(_ context.Context, p repo.EventScanParams) (repo.EventScanPage, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	page := repo.EventScanPage{Next: p.After, End: true}
	looked := 0
	for _, ev := range o.events {
		if ev.ID <= p.After {
			continue
		}
		if o.heldAbove != 0 && ev.ID > o.heldAbove {
			page.Held, page.End = true, true
			break
		}
		if looked == p.Rows || len(page.Events) == p.Limit {
			page.End = false
			break
		}
		looked++
		page.Next = ev.ID
		if (Filter{BackfillID: p.BackfillID, DagID: p.DagID, Type: p.Type}).Keeps(ev) {
			page.Events = append(page.Events, ev)
		}
	}
	return page, nil
}

func (o *fakeOutbox) BackfillProgressMany(_ context.Context, ids []int64) ([]repo.Backfill, time.Time, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ids[0] != 1 {
		return nil, time.Time{}, nil
	}
	return []repo.Backfill{{ID: 1, State: o.state, Progress: repo.Progress{Queued: 2}}}, time.Now(), nil
}

func (o *fakeOutbox) TerminalEventStored(context.Context, int64, int64) (bool, error) {
	return false, nil
}

// recordingSink records the frames a stream writes.
type recordingSink struct {
	mu        sync.Mutex
	events    []int64
	progress  int
	keepAlive int
}

func (s *recordingSink) Event(ev domain.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev.ID)
	return nil
}

func (s *recordingSink) Progress(Progress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress++
	return nil
}

func (s *recordingSink) KeepAlive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keepAlive++
	return nil
}

func (s *recordingSink) Flush() error { return nil }

func (s *recordingSink) sent() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// A backfill's stream replays the stored events after its position in small scans, skips
// what the hub hands it again, and ends with the terminal event; the sink only frames.
func TestBackfillStreamReplaysThenFollowsEachEventOnceUntilTerminal(t *testing.T) {
	t.Parallel()
	outbox := &fakeOutbox{state: domain.BackfillRunning}
	for id := int64(1); id <= 9; id++ {
		outbox.events = append(outbox.events, domain.Event{ID: id, BackfillID: 1 + id%2, Type: domain.EventBackfillUpdated})
	}
	hub := New(nil, Config{})
	reader := NewReader(outbox, 2, 1) // two rows a scan: the replay takes several steps
	if _, err := OpenBackfill(context.Background(), hub, reader, 404, 0, time.Hour); !errors.Is(err, repo.ErrBackfillNotFound) {
		t.Fatalf("open a missing backfill: %v, want ErrBackfillNotFound", err)
	}
	st, err := OpenBackfill(context.Background(), hub, reader, 1, 2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sink, done := serveInBackground(st)
	// Backfill 1's stored events are the even ids; the position is 2.
	waitFor(t, func() bool { return slices.Equal(sink.sent(), []int64{4, 6, 8}) }, "the replay after event 2")
	// The hub hands on an event the replay sent, then a new one, then the terminal one.
	st.sub.push(domain.Event{ID: 8, BackfillID: 1, Type: domain.EventBackfillUpdated})
	st.sub.push(domain.Event{ID: 10, BackfillID: 1, Type: domain.EventBackfillUpdated})
	st.sub.push(domain.Event{ID: 11, BackfillID: 1, Type: domain.EventBackfillSucceeded})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end with its terminal event")
	}
	if got := sink.sent(); !slices.Equal(got, []int64{4, 6, 8, 10, 11}) {
		t.Fatalf("sent %v, want each event once in id order and the terminal last", got)
	}
	if sink.progress != 1 {
		t.Fatalf("%d progress messages, want the one after the replay", sink.progress)
	}
}

// The stream of every event keeps what its filter keeps, moves past the rest, is not ended by
// a terminal event, and sends a keep-alive when quiet; the server's shutdown ends it.
func TestGlobalStreamFiltersKeepsAliveAndEndsAtShutdown(t *testing.T) {
	t.Parallel()
	dag := "wanted"
	outbox := &fakeOutbox{}
	for id := int64(1); id <= 6; id++ {
		d := "other"
		if id%3 == 0 {
			d = dag
		}
		outbox.events = append(outbox.events, domain.Event{ID: id, DagID: d, Type: domain.EventBackfillSucceeded})
	}
	hub := New(nil, Config{})
	st, err := Open(hub, NewReader(outbox, 1, 1), 0, Filter{DagID: &dag}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sink, done := serveInBackground(st)
	waitFor(t, func() bool { return slices.Equal(sink.sent(), []int64{3, 6}) }, "the catch-up of the DAG's events")
	st.sub.push(domain.Event{ID: 7, DagID: "other", Type: domain.EventBackfillCreated})
	st.sub.push(domain.Event{ID: 8, DagID: dag, Type: domain.EventBackfillCreated})
	waitFor(t, func() bool { return slices.Equal(sink.sent(), []int64{3, 6, 8}) }, "the live event the filter keeps")
	waitFor(t, func() bool { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.keepAlive > 0 }, "a keep-alive")
	hub.EndStreams()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived the server's shutdown")
	}
}

// A stream whose read stops at events an older transaction holds back reads them itself once
// they are served, and sends nothing the hub hands on past them before them: the hub may have
// read past them already, with a horizon read higher, and never hand them on.
func TestStreamReadsHeldEventsItselfAndKeepsTheirOrder(t *testing.T) {
	t.Parallel()
	outbox := &fakeOutbox{heldAbove: 2}
	for id := int64(1); id <= 4; id++ {
		outbox.events = append(outbox.events, domain.Event{ID: id, BackfillID: 1, Type: domain.EventBackfillUpdated})
	}
	hub := New(nil, Config{})
	st, err := Open(hub, NewReader(outbox, 10, 1), 0, Filter{}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sink, done := serveInBackground(st)
	waitFor(t, func() bool { return slices.Equal(sink.sent(), []int64{1, 2}) }, "the replay up to the held events")
	fifth := domain.Event{ID: 5, BackfillID: 1, Type: domain.EventBackfillUpdated}
	outbox.mu.Lock()
	outbox.events = append(outbox.events, fifth)
	outbox.mu.Unlock()
	st.sub.push(fifth)
	time.Sleep(2 * heldWait) // a read of the outbox in between, still held
	if got := sink.sent(); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("sent %v while events 3 and 4 were held, want only 1 and 2", got)
	}
	outbox.mu.Lock()
	outbox.heldAbove = 0
	outbox.mu.Unlock()
	waitFor(t, func() bool { return slices.Equal(sink.sent(), []int64{1, 2, 3, 4, 5}) }, "the held events, then the hub's, in id order")
	hub.EndStreams()
	<-done
}

// serveInBackground serves st to a recording sink until it ends (done closes).
func serveInBackground(st *Stream) (*recordingSink, <-chan struct{}) {
	sink := &recordingSink{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Serve(context.Background(), sink)
	}()
	return sink, done
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package events

import (
	"context"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// DefaultStreamKeepAlive is the silence after which a stream sends a keep-alive, so that
// proxies and clients can tell a quiet stream from a dead one.
const DefaultStreamKeepAlive = 15 * time.Second

// Sink writes a stream's messages as its protocol frames them (handlers: Server-Sent Events).
// The first error a write or flush answers ends the stream: the client has gone.
type Sink interface {
	Event(ev domain.Event) error
	Progress(p Progress) error
	KeepAlive() error
	Flush() error
}

// Subscriber is the replica's hub as a stream sees it (Hub).
type Subscriber interface {
	Subscribe(backfillID int64) (*Subscription, error)
	// Done is closed when the server shuts down: every stream ends.
	Done() <-chan struct{}
}

// Stream is one client's stream of the outbox: the stored events after its position, then
// what the hub hands on, in id order and each once. A backfill's stream also sends the
// backfill's progress, and ends with its terminal event; the stream of every event (Open)
// ends only when its client leaves or the server shuts down.
type Stream struct {
	sub       *Subscription
	reader    *Reader
	done      <-chan struct{}
	keepAlive time.Duration
	filter    Filter
	// followed is the followed backfill as read when the stream opened; nil for Open's.
	followed *repo.Backfill
	lastID   int64
	sink     Sink
	err      error
	// heldEvery is 0 unless the stream's last read of the outbox stopped at committed events
	// that an older transaction holds back (held). The hub may have read past them already
	// (the horizon it read was higher: event_horizon can count a transaction of another
	// database that ended meanwhile as this one's), so the stream reads them itself, every
	// heldEvery.
	heldEvery time.Duration
}

// OpenBackfill opens backfill id's stream after event `after`. It subscribes before reading
// anything, so that what the hub reads from then on reaches the stream and what it read before
// is in the outbox for the replay (Hub.Subscribe). Its errors: ErrTooManyStreams and
// ErrStopped from the hub, repo.ErrBackfillNotFound, or the read's.
func OpenBackfill(ctx context.Context, hub Subscriber, reader *Reader, id, after int64, keepAlive time.Duration) (*Stream, error) {
	st, err := open(hub, reader, id, after, Filter{BackfillID: &id}, keepAlive)
	if err != nil {
		return nil, err
	}
	rows, _, err := reader.store.BackfillProgressMany(ctx, []int64{id})
	if err == nil && len(rows) == 0 {
		err = repo.ErrBackfillNotFound
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	st.followed = &rows[0]
	return st, nil
}

// Open opens the stream of every event f keeps after `after`: a backfill filter subscribes to
// that backfill's events, any other to every event.
func Open(hub Subscriber, reader *Reader, after int64, f Filter, keepAlive time.Duration) (*Stream, error) {
	subID := Everything
	if f.BackfillID != nil {
		subID = *f.BackfillID
	}
	return open(hub, reader, subID, after, f, keepAlive)
}

func open(hub Subscriber, reader *Reader, subID, after int64, f Filter, keepAlive time.Duration) (*Stream, error) {
	sub, err := hub.Subscribe(subID)
	if err != nil {
		return nil, err
	}
	if keepAlive <= 0 {
		keepAlive = DefaultStreamKeepAlive
	}
	return &Stream{sub: sub, reader: reader, done: hub.Done(), keepAlive: keepAlive, filter: f, lastID: after}, nil
}

// Close ends the stream's subscription; it is idempotent.
func (s *Stream) Close() { s.sub.Close() }

// Serve writes the stream to sink until it ends, the client leaves (ctx, or a failed write)
// or the server shuts down. The answer's headers are flushed at once: a replay may take many
// steps before it finds anything.
func (s *Stream) Serve(ctx context.Context, sink Sink) {
	s.sink = sink
	if s.flush() != nil {
		return
	}
	if s.followed != nil {
		s.serveBackfill(ctx)
		return
	}
	s.serveAll(ctx)
}

func (s *Stream) serveBackfill(ctx context.Context) {
	if _, ended := s.readBack(ctx); ended || s.err != nil {
		s.flush()
		return
	}
	// A terminal backfill's terminal event committed with its state, before we read the
	// state, yet the replay did not reach it: retention pruned it (nothing follows: end), or
	// an older transaction of the database is still open and the outbox does not serve it
	// yet (the feed serves in id order): follow the hub until it comes. Ending here would
	// send a stream without its terminal event.
	if s.followed.State.Terminal() {
		held, err := s.reader.store.TerminalEventStored(ctx, s.followed.ID, s.lastID)
		if err != nil || !held {
			s.flush()
			return
		}
	}
	last := ProgressOf(*s.followed)
	s.progress(last)
	if s.flush() != nil {
		return
	}
	s.follow(ctx, func() (wrote, ended bool) {
		evs, lagged, p := s.sub.Take()
		if lagged {
			// This stream fell behind the hub, or its last read stopped at held events and
			// it is time to read again (follow): read what it missed from the outbox.
			if _, ended := s.readBack(ctx); ended {
				return true, true
			}
		}
		if s.held() {
			evs = nil // they lie past events still held back: the next read takes them
		}
		for _, ev := range evs {
			if s.event(ev) && ev.Type.Terminal() {
				return true, true
			}
		}
		if p != nil && !p.SameCounts(last) {
			last = *p
			s.progress(last)
		}
		return true, false
	})
}

// serveAll serves the stream of every event the filter keeps. It reads the outbox only to
// catch up (at the start, and when it fell behind the hub), in bounded steps; live, it keeps
// what the replica's hub hands it, so that a filter that matches rarely costs no read of the
// outbox at all. A terminal event does not end it.
func (s *Stream) serveAll(ctx context.Context) {
	s.readBack(ctx)
	if s.flush() != nil {
		return
	}
	s.follow(ctx, func() (wrote, ended bool) {
		evs, lagged, _ := s.sub.Take()
		if lagged {
			// Fell behind the hub, subscribed while it read, or the last read stopped at held
			// events and it is time to read again (follow): read the outbox itself.
			wrote, _ := s.readBack(ctx)
			return wrote, s.err != nil
		}
		if s.held() {
			return false, false // evs lie past events still held back: the next read takes them
		}
		for _, ev := range evs {
			if ev.ID <= s.lastID {
				continue // caught up past it already
			}
			if s.filter.Keeps(ev) {
				wrote = s.event(ev) || wrote
			}
			s.lastID = ev.ID
		}
		return wrote, s.err != nil
	})
}

// readBack writes what the outbox holds after the stream's position that the filter keeps,
// in id order, reading in bounded steps and moving the position past the rows it looked at
// (so that old events cost their walk of the outbox once). It reports whether it wrote
// anything and whether it wrote a terminal event, where a backfill's stream stops reading.
// An error it meets ends the stream, unless the client had gone already.
func (s *Stream) readBack(ctx context.Context) (wrote, terminal bool) {
	for s.err == nil && ctx.Err() == nil {
		read, err := s.reader.streamRead(ctx, s.lastID, s.filter)
		if err != nil {
			if ctx.Err() == nil {
				s.err = err
			}
			return wrote, false
		}
		for _, ev := range read.Events {
			if s.event(ev) {
				wrote = true
				if s.followed != nil && ev.Type.Terminal() {
					return true, true
				}
			}
		}
		s.lastID = max(s.lastID, read.Next)
		if read.End {
			s.setHeld(read.Held)
			return wrote, false
		}
		if len(read.Events) > 0 && s.flush() != nil {
			return wrote, false
		}
	}
	return wrote, false
}

// setHeld records whether the stream's last read stopped at held events, and paces the reads
// that follow while it does as the hub paces its own (nextHeldReread).
func (s *Stream) setHeld(held bool) {
	if !held {
		s.heldEvery = 0
		return
	}
	s.heldEvery = nextHeldReread(s.heldEvery)
}

// held says whether the stream's last read of the outbox stopped at held events.
func (s *Stream) held() bool { return s.heldEvery > 0 }

// follow keeps the stream open until the client leaves, the server shuts down, a write fails
// or step says the stream has ended. step runs whenever the hub has news, and while the
// stream's last read was held back (it reads the outbox again then), and says whether it
// wrote anything; after a quiet keep-alive interval a keep-alive keeps proxies from closing
// the connection. Every round ends with a flush.
func (s *Stream) follow(ctx context.Context, step func() (wrote, ended bool)) {
	keepAlive := time.NewTicker(s.keepAlive)
	defer keepAlive.Stop()
	reread := time.NewTimer(time.Hour)
	reread.Stop()
	defer reread.Stop()
	armed := false
	for {
		if s.held() && !armed {
			reread.Reset(s.heldEvery)
			armed = true
		}
		run := false
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-keepAlive.C:
			s.write(s.sink.KeepAlive)
		case <-reread.C:
			armed = false
			s.sub.lag() // step reads the outbox from the last event sent
			run = true
		case <-s.sub.Wake():
			run = true
		}
		if run {
			wrote, ended := step()
			if ended {
				s.flush()
				return
			}
			if wrote {
				keepAlive.Reset(s.keepAlive)
			}
		}
		if s.flush() != nil {
			return
		}
	}
}

// event writes ev unless it was already sent, and reports whether it wrote it.
func (s *Stream) event(ev domain.Event) bool {
	if ev.ID <= s.lastID || s.err != nil {
		return false
	}
	s.err = s.sink.Event(ev)
	s.lastID = ev.ID
	return s.err == nil
}

func (s *Stream) progress(p Progress) { s.write(func() error { return s.sink.Progress(p) }) }

func (s *Stream) write(w func() error) {
	if s.err == nil {
		s.err = w()
	}
}

func (s *Stream) flush() error {
	s.write(s.sink.Flush)
	return s.err
}

package handlers

import (
	"net/http"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/events"
)

func eventFilterOf(params api.ListEventsParams) eventFilter {
	f := eventFilter{backfillID: params.BackfillId, dagID: params.DagId}
	if params.Type != nil {
		t := domain.EventType(*params.Type)
		f.typ = &t
	}
	return f
}

// streamAllEvents serves GET /events as Server-Sent Events: the stored events after `after`
// that the filters keep, then new ones as they commit, until the client leaves or the server
// shuts down. Unlike a backfill's stream it has no terminal event and no progress messages.
// It reads the outbox only to catch up (at the start, and when it fell behind the hub), in
// bounded steps (streamRead); live, it keeps what the replica's hub hands it, so that a
// filter that matches rarely costs no read of the outbox at all.
func (s *Server) streamAllEvents(w http.ResponseWriter, r *http.Request, after int64, f eventFilter) {
	// A backfill filter subscribes to that backfill's events, any other to every event.
	subID := events.Everything
	if f.backfillID != nil {
		subID = *f.backfillID
	}
	sub := s.subscribe(w, subID)
	if sub == nil {
		return
	}
	defer sub.Close()
	ctx := r.Context()

	sw := startStream(w, after)
	// The answer's headers go at once: the catch-up below may take many steps before it
	// finds anything to send, and the client is connected meanwhile.
	if sw.flush() != nil {
		return
	}
	// catchUp writes everything stored after the stream's position, in id order, and moves
	// the position past what it looked at; it reports whether it wrote anything.
	catchUp := func() bool {
		wrote := false
		for sw.err == nil && ctx.Err() == nil {
			read, err := s.streamRead(ctx, sw.lastID, replayBatch, f)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Error("global event stream: read events", "err", err)
					sw.err = err
				}
				return wrote
			}
			for _, ev := range read.events {
				sw.event(ev) // a terminal event does not end this stream
				wrote = true
			}
			sw.lastID = max(sw.lastID, read.next)
			if read.end {
				return wrote
			}
			if wrote && sw.flush() != nil {
				return wrote
			}
		}
		return wrote
	}
	catchUp()
	if sw.flush() != nil {
		return
	}
	s.follow(ctx, sw, sub.Wake(), nil, func() (wrote, ended bool) {
		evs, lagged, _ := sub.Take()
		if lagged {
			// Fell behind the hub, or subscribed while it read: read the outbox itself.
			return catchUp(), sw.err != nil
		}
		for _, ev := range evs {
			if ev.ID <= sw.lastID {
				continue // caught up past it already
			}
			if f.keeps(ev) {
				sw.event(ev)
				wrote = true
			}
			sw.lastID = ev.ID
		}
		return wrote, sw.err != nil
	})
}

package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// DefaultGlobalStreamPoll is how often the stream of every event reads the outbox. The hub
// wakes a stream for one backfill's events; a stream of all of them reads the outbox itself,
// one indexed query from its last id, so it never misses what the hub hands elsewhere.
const DefaultGlobalStreamPoll = 250 * time.Millisecond

// eventFilter is what a reader of the whole outbox keeps.
type eventFilter struct {
	backfillID *int64
	dagID      *string
	typ        *domain.EventType
}

func eventFilterOf(params api.ListEventsParams) eventFilter {
	f := eventFilter{backfillID: params.BackfillId, dagID: params.DagId}
	if params.Type != nil {
		t := domain.EventType(*params.Type)
		f.typ = &t
	}
	return f
}

// readEvents reads up to limit events after `after` that f keeps, and the last id it looked
// at (the next `after`: past the events the DAG filter dropped, so a reader moves on). The
// backfill and type filters are the query's; the DAG's is applied here, over the outbox's id
// order, so that the outbox's own query keeps its one shape. wait is EventListParams.Wait.
func (s *Server) readEvents(ctx context.Context, after int64, limit int, f eventFilter, wait time.Duration) ([]domain.Event, int64, error) {
	out := []domain.Event{}
	for {
		evs, err := s.store.EventList(ctx, repo.EventListParams{After: after, Limit: max(limit, replayBatch), BackfillID: f.backfillID, Type: f.typ, Wait: wait})
		if err != nil {
			return nil, after, err
		}
		for _, ev := range evs {
			if f.dagID != nil && ev.DagID != *f.dagID {
				after = ev.ID
				continue
			}
			out = append(out, ev)
			after = ev.ID
			if len(out) == limit {
				return out, after, nil
			}
		}
		if len(evs) < max(limit, replayBatch) {
			return out, after, nil
		}
	}
}

// streamAllEvents serves GET /events as Server-Sent Events: the stored events after `after`
// that the filters keep, then new ones as they commit, until the client leaves or the server
// shuts down. Unlike a backfill's stream it has no terminal event and no progress messages.
func (s *Server) streamAllEvents(w http.ResponseWriter, r *http.Request, after int64, f eventFilter) {
	// The subscription counts against the stream limit and ends with the hub. With a
	// backfill filter it also wakes the stream when that backfill's events arrive; without
	// one (id 0 is never a backfill's) the poll below reads them.
	var subID int64
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
	// catchUp writes everything stored after the last id sent, in id order.
	catchUp := func() bool {
		for sw.err == nil {
			evs, next, err := s.readEvents(ctx, sw.lastID, replayBatch, f, 0)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Error("global event stream: read events", "err", err)
				}
				return false
			}
			wrote := len(evs) > 0
			for _, ev := range evs {
				sw.event(ev) // a terminal event does not end this stream
			}
			sw.lastID = max(sw.lastID, next)
			if len(evs) < replayBatch {
				return wrote
			}
		}
		return false
	}
	catchUp()
	if sw.flush() != nil {
		return
	}
	poll := s.globalStreamPoll
	if poll <= 0 {
		poll = DefaultGlobalStreamPoll
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	s.follow(ctx, sw, sub.Wake(), ticker.C, func() (wrote, ended bool) {
		sub.Take() // what arrived is in the outbox too; read it there, in id order
		return catchUp(), false
	})
}

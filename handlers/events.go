package handlers

import (
	"net/http"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/events"
)

// eventReadWait is how long a JSON read of events waits for committed events that an older
// transaction still holds back (readEventPage), outside its admission slot: a client that
// reads right after its own change sees it. Streams do not wait: the hub hands held events
// on when they clear.
const eventReadWait = time.Second

// eventCollectionOut is a page of events; each is the one event document (domain.Event)
// that the streams and the webhooks send too.
type eventCollectionOut struct {
	Events    []domain.Event `json:"events"`
	NextAfter int64          `json:"next_after"`
}

func eventsOut(evs []domain.Event, after int64) eventCollectionOut {
	out := eventCollectionOut{Events: nonNil(evs), NextAfter: after} // the spec's events is an array, never null
	if len(evs) > 0 {
		out.NextAfter = evs[len(evs)-1].ID
	}
	return out
}

func eventsAfter(after *api.EventsAfter) int64 {
	if after == nil {
		return 0
	}
	return *after
}

// ListEvents pages the outbox by id, or streams it for Accept: text/event-stream
// (events_stream.go).
func (s *Server) ListEvents(w http.ResponseWriter, r *http.Request, params api.ListEventsParams) {
	after := eventsAfter(params.After)
	if params.LastEventID != nil {
		after = *params.LastEventID
	}
	f := eventFilterOf(params)
	if IsEventStream(r) {
		s.streamAllEvents(w, r, after, f)
		return
	}
	limit, _ := s.page(params.Limit, nil)
	s.writeEventPage(w, r, after, limit, f)
}

// writeEventPage answers a JSON page of events (readEventPage): next_after is past the rows
// the read looked at, which the filters may have skipped, so that asking again moves on.
func (s *Server) writeEventPage(w http.ResponseWriter, r *http.Request, after int64, limit int, f events.Filter) {
	read, err := s.readEventPage(r.Context(), after, limit, f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := eventsOut(read.Events, after)
	out.NextAfter = max(out.NextAfter, read.Next)
	s.writeJSON(w, r, http.StatusOK, out)
}

// GetBackfillEvents answers a backfill's events: a live stream for Accept:
// text/event-stream (events_stream.go), a page of the stored ones otherwise.
func (s *Server) GetBackfillEvents(w http.ResponseWriter, r *http.Request, id int64, params api.GetBackfillEventsParams) {
	after := eventsAfter(params.After)
	if params.LastEventID != nil {
		after = *params.LastEventID
	}
	if IsEventStream(r) {
		s.streamEvents(w, r, id, after)
		return
	}
	if _, err := s.store.BackfillGet(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, _ := s.page(params.Limit, nil)
	s.writeEventPage(w, r, after, limit, events.Filter{BackfillID: &id})
}

func eventFilterOf(params api.ListEventsParams) events.Filter {
	f := events.Filter{BackfillID: params.BackfillId, DagID: params.DagId}
	if params.Type != nil {
		t := domain.EventType(*params.Type)
		f.Type = &t
	}
	return f
}

package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/events"
)

// EventStreams is the replica's one outbox listener (events.Hub) that streams subscribe to.
type EventStreams = events.Subscriber

var streamPath = regexp.MustCompile(`^/api/v1/(backfills/[^/]+/)?events/?$`)

// IsEventStream reports whether r asks for a Server-Sent Events stream (a backfill's, or
// every event's). Streams are long-lived by design and bounded by their own limit
// (events.Config.MaxStreams), so the admission control of ordinary requests must let them
// through: it calls this for every request, hence the Accept header before the regular
// expression, which most requests then never run (about 1 µs of a status read's CPU).
func IsEventStream(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/event-stream") &&
		streamPath.MatchString(r.URL.Path)
}

// streamEvents serves one backfill's stream (events.OpenBackfill) as Server-Sent Events.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id, after int64) {
	if s.streams == nil {
		writeStreamsOff(w)
		return
	}
	st, err := events.OpenBackfill(r.Context(), s.streams, s.outbox, id, after, s.streamKeepAlive)
	if err != nil {
		s.writeStreamRefused(w, r, err)
		return
	}
	defer st.Close()
	st.Serve(r.Context(), startStream(w))
}

// streamAllEvents serves GET /events as Server-Sent Events (events.Open): the stored events
// after `after` that the filters keep, then new ones as they commit.
func (s *Server) streamAllEvents(w http.ResponseWriter, r *http.Request, after int64, f events.Filter) {
	if s.streams == nil {
		writeStreamsOff(w)
		return
	}
	st, err := events.Open(s.streams, s.outbox, after, f, s.streamKeepAlive)
	if err != nil {
		s.writeStreamRefused(w, r, err)
		return
	}
	defer st.Close()
	st.Serve(r.Context(), startStream(w))
}

// sseWriter frames a stream's messages as Server-Sent Events (events.Sink).
type sseWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (sw *sseWriter) Event(ev domain.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %d: %w", ev.ID, err)
	}
	_, err = fmt.Fprintf(sw.w, "id: %d\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, data)
	return err
}

func (sw *sseWriter) Progress(p events.Progress) error {
	c := p.Counts
	// The progress message's data, as the spec's description of the stream gives it.
	data, err := json.Marshal(struct {
		Progress   api.BackfillProgress `json:"progress"`
		State      api.BackfillState    `json:"state"`
		EtaSeconds *float64             `json:"eta_seconds"`
	}{
		Progress: api.BackfillProgress{
			Total: c.Total(), Queued: c.Queued, Running: c.Running, Success: c.Success,
			Failed: c.Failed, Canceled: c.Canceled, Skipped: c.Skipped, Blocked: c.Blocked,
		},
		State:      api.BackfillState(p.State),
		EtaSeconds: p.ETA,
	})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(sw.w, "event: progress\ndata: %s\n\n", data)
	return err
}

func (sw *sseWriter) KeepAlive() error {
	_, err := io.WriteString(sw.w, ": keep-alive\n\n")
	return err
}

func (sw *sseWriter) Flush() error { return sw.rc.Flush() }

// startStream answers 200 as a Server-Sent Events stream and returns its writer.
func startStream(w http.ResponseWriter) *sseWriter {
	rc := http.NewResponseController(w)
	// The server's WriteTimeout bounds ordinary answers; a stream lives as long as it follows.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: rc}
}

func writeStreamsOff(w http.ResponseWriter) {
	writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", "event streams are not enabled on this server"))
}

// writeStreamRefused answers a stream that could not open: 503 busy at the stream limit, 503
// unavailable while the server shuts down (both with Retry-After), or the error's answer (404
// for a backfill that does not exist).
func (s *Server) writeStreamRefused(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, events.ErrTooManyStreams):
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "busy", "this server has as many event streams open as it allows; retry shortly"))
	case errors.Is(err, events.ErrStopped):
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
		writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", "this server is shutting down; retry on another"))
	default:
		s.writeError(w, r, err)
	}
}

package handlers

import (
	"context"
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
	"github.com/backfillsvc/backfill/repo"
)

// EventStreams is the replica's one outbox listener (events.Hub) that streams subscribe to.
type EventStreams interface {
	Subscribe(backfillID int64) (*events.Subscription, error)
	// Done is closed when the server shuts down: every stream ends.
	Done() <-chan struct{}
}

// DefaultStreamKeepAlive is the silence after which a stream sends a comment line, so that
// proxies and clients can tell a quiet stream from a dead one.
const DefaultStreamKeepAlive = 15 * time.Second

// replayBatch is how many stored events one replay query reads.
const replayBatch = 500

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

// streamEvents serves one backfill's stream: the stored events after `after`, then live
// events and progress from the hub, until the terminal event, the client leaves or the
// server shuts down.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id, after int64) {
	// Subscribe before reading anything: what the hub reads from now on reaches us, and what
	// it read before is in the outbox for the replay (events.Hub.Subscribe).
	sub := s.subscribe(w, id)
	if sub == nil {
		return
	}
	defer sub.Close()
	ctx := r.Context()
	rows, _, err := s.store.BackfillProgressMany(ctx, []int64{id})
	if err == nil && len(rows) == 0 {
		err = repo.ErrBackfillNotFound
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b := rows[0]

	sw := startStream(w, after)
	// The answer's headers go at once: a replay may take many steps before it finds anything.
	if sw.flush() != nil {
		return
	}
	if ended := s.replay(ctx, sw, id); ended || sw.err != nil {
		sw.flush()
		return
	}
	// A terminal backfill's terminal event committed with its state, before we read the
	// state, yet the replay did not reach it: retention pruned it (nothing follows: end), or
	// an older transaction of the database is still open and the outbox does not serve it
	// yet (the feed serves in id order): follow the hub until it comes. Ending here would
	// send a stream without its terminal event.
	if b.State.Terminal() {
		held, err := s.store.TerminalEventStored(ctx, id, sw.lastID)
		if err != nil || !held {
			sw.flush()
			return
		}
	}
	last := events.ProgressOf(b)
	sw.progress(last)
	if sw.flush() != nil {
		return
	}

	s.follow(ctx, sw, sub.Wake(), nil, func() (wrote, ended bool) {
		evs, lagged, p := sub.Take()
		if lagged {
			// This stream fell behind the hub: read what it missed from the outbox.
			if s.replay(ctx, sw, id) {
				return true, true
			}
		}
		for _, ev := range evs {
			if sw.event(ev) {
				return true, true
			}
		}
		if p != nil && !p.SameCounts(last) {
			last = *p
			sw.progress(last)
		}
		return true, false
	})
}

// follow keeps a stream open until the client leaves, the server shuts down, a write fails or
// step says the stream has ended. step runs whenever wake or tick (nil: never) fires and says
// whether it wrote anything; after a quiet keep-alive interval a comment keeps proxies from
// closing the connection. Every round ends with a flush.
func (s *Server) follow(ctx context.Context, sw *sseWriter, wake <-chan struct{}, tick <-chan time.Time, step func() (wrote, ended bool)) {
	keepAlive := time.NewTicker(s.streamKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.streams.Done():
			return
		case <-keepAlive.C:
			sw.comment("keep-alive")
		case <-wake:
			if s.stepped(sw, keepAlive, step) {
				return
			}
		case <-tick:
			if s.stepped(sw, keepAlive, step) {
				return
			}
		}
		if sw.flush() != nil {
			return
		}
	}
}

// stepped runs one step of follow and reports whether the stream has ended (flushed).
func (s *Server) stepped(sw *sseWriter, keepAlive *time.Ticker, step func() (wrote, ended bool)) bool {
	wrote, ended := step()
	if ended {
		sw.flush()
		return true
	}
	if wrote {
		keepAlive.Reset(s.streamKeepAlive)
	}
	return false
}

// replay writes the backfill's stored events after the last one sent and reports whether
// the terminal one was among them.
// It reads in bounded steps (streamRead) and moves the stream's position past the rows it
// looked at, so that a backfill whose events are old costs its walk of the outbox once.
func (s *Server) replay(ctx context.Context, sw *sseWriter, id int64) bool {
	for sw.err == nil {
		read, err := s.streamRead(ctx, sw.lastID, replayBatch, eventFilter{backfillID: &id})
		if err != nil {
			sw.err = err
			return false
		}
		for _, ev := range read.events {
			if sw.event(ev) {
				return true
			}
		}
		sw.lastID = max(sw.lastID, read.next)
		if read.end {
			return false
		}
		if len(read.events) > 0 && sw.flush() != nil {
			return false
		}
	}
	return false
}

// sseWriter writes Server-Sent Events messages; after the first failed write it writes
// nothing more (the client has gone).
type sseWriter struct {
	w      io.Writer
	rc     *http.ResponseController
	lastID int64
	err    error
}

// event writes ev unless it was already sent, and reports whether it ends the stream.
func (sw *sseWriter) event(ev domain.Event) bool {
	if ev.ID <= sw.lastID {
		return false
	}
	data, err := json.Marshal(ev)
	if err != nil {
		sw.err = fmt.Errorf("encode event %d: %w", ev.ID, err)
		return true
	}
	sw.printf("id: %d\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, data)
	sw.lastID = ev.ID
	return ev.Type.Terminal()
}

func (sw *sseWriter) progress(p events.Progress) {
	c := p.Counts
	// The progress message's data, as the spec's description of the stream gives it.
	data, err := json.Marshal(struct {
		Progress   api.BackfillProgress `json:"progress"`
		State      api.BackfillState    `json:"state"`
		EtaSeconds *float64             `json:"eta_seconds"`
	}{
		Progress: api.BackfillProgress{
			Total: c.Total(), Queued: c.Queued, Running: c.Running, Success: c.Success,
			Failed: c.Failed, Canceled: c.Canceled, Skipped: c.Skipped,
		},
		State:      api.BackfillState(p.State),
		EtaSeconds: p.ETA,
	})
	if err != nil {
		sw.err = err
		return
	}
	sw.printf("event: progress\ndata: %s\n\n", data)
}

func (sw *sseWriter) comment(text string) { sw.printf(": %s\n\n", text) }

func (sw *sseWriter) printf(format string, args ...any) {
	if sw.err == nil {
		_, sw.err = fmt.Fprintf(sw.w, format, args...)
	}
}

func (sw *sseWriter) flush() error {
	if sw.err == nil {
		sw.err = sw.rc.Flush()
	}
	return sw.err
}

// subscribe subscribes a stream to the hub's news of backfillID (0 for none), or answers why
// it cannot and returns nil: streams not enabled, at the stream limit, or shutting down.
func (s *Server) subscribe(w http.ResponseWriter, backfillID int64) *events.Subscription {
	if s.streams == nil {
		writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", "event streams are not enabled on this server"))
		return nil
	}
	sub, err := s.streams.Subscribe(backfillID)
	if err != nil {
		writeSubscribeRefused(w, err)
		return nil
	}
	return sub
}

// startStream answers 200 as a Server-Sent Events stream and returns its writer, which has
// sent nothing after id after.
func startStream(w http.ResponseWriter, after int64) *sseWriter {
	rc := http.NewResponseController(w)
	// The server's WriteTimeout bounds ordinary answers; a stream lives as long as it follows.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: rc, lastID: after}
}

// writeSubscribeRefused answers a stream that could not subscribe: 503 busy at the stream limit,
// 503 unavailable while the server shuts down; both with Retry-After.
func writeSubscribeRefused(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
	if errors.Is(err, events.ErrTooManyStreams) {
		writeProblem(w, problem(http.StatusServiceUnavailable, "busy", "this server has as many event streams open as it allows; retry shortly"))
		return
	}
	writeProblem(w, problem(http.StatusServiceUnavailable, "unavailable", "this server is shutting down; retry on another"))
}

package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// sseMsg is one Server-Sent Events message, or a comment line when Comment is set.
type sseMsg struct {
	ID, Event, Data, Comment string
}

// sseStream is a test client of GET /backfills/{id}/events with Accept: text/event-stream.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// evOpenStream opens a backfill's stream; headers come in name, value pairs.
func evOpenStream(t *testing.T, e *env, id int64, headers ...string) *sseStream {
	t.Helper()
	// The deadline only bounds a broken test: each read waits for a message it needs.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/backfills/%d/events", e.URL, id), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.HTTP.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sseStream{t: t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.Close)
	return s
}

func (s *sseStream) Close() {
	s.cancel()
	s.resp.Body.Close()
}

// evTryStream opens a stream, or answers nil when the server answers 503 busy.
func evTryStream(t *testing.T, e *env, id int64) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/backfills/%d/events", e.URL, id), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.HTTP.Do(req)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusServiceUnavailable {
		resp.Body.Close()
		cancel()
		return nil
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s := &sseStream{t: t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.Close)
	return s
}

// Next reads the next message or comment; io.EOF when the server ended the stream.
func (s *sseStream) Next() (sseMsg, error) {
	var m sseMsg
	any := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" && !any {
				return m, io.EOF
			}
			return m, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if any {
				return m, nil
			}
			continue
		}
		any = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			m.Comment = value
		case "id":
			m.ID = value
		case "event":
			m.Event = value
		case "data":
			m.Data += value
		}
	}
}

// NextEvent skips comments and progress messages and returns the next stored event.
func (s *sseStream) NextEvent() evEvent {
	s.t.Helper()
	for {
		m := s.must()
		if m.Event != "" && m.Event != "progress" {
			return s.decode(m)
		}
	}
}

func (s *sseStream) must() sseMsg {
	s.t.Helper()
	m, err := s.Next()
	require.NoError(s.t, err)
	return m
}

func (s *sseStream) decode(m sseMsg) evEvent {
	s.t.Helper()
	var ev evEvent
	require.NoError(s.t, json.Unmarshal([]byte(m.Data), &ev), "data: %s", m.Data)
	require.Equal(s.t, strconv.FormatInt(ev.ID, 10), m.ID, "id: is the event's id")
	require.Equal(s.t, ev.Type, m.Event, "event: is the event's type")
	return ev
}

// sseProgress is a progress message's data.
type sseProgress struct {
	Progress struct {
		Total, Queued, Running, Success, Failed, Canceled, Skipped int64
	} `json:"progress"`
	State      string   `json:"state"`
	EtaSeconds *float64 `json:"eta_seconds"`
}

// UntilProgress reads until a progress message satisfies ok, failing on any stored event
// on the way (want lists the ones allowed, in order), and returns it.
func (s *sseStream) UntilProgress(ok func(sseProgress) bool) sseProgress {
	s.t.Helper()
	for {
		m := s.must()
		if m.Event == "" {
			continue
		}
		require.Equal(s.t, "progress", m.Event, "no stored event expected before this progress: %s", m.Data)
		require.Empty(s.t, m.ID, "progress messages carry no id")
		var p sseProgress
		require.NoError(s.t, json.Unmarshal([]byte(m.Data), &p))
		if ok(p) {
			return p
		}
	}
}

// RequireEnd requires the server to end the stream, cleanly, with nothing but progress
// and comments on the way.
func (s *sseStream) RequireEnd() {
	s.t.Helper()
	for {
		m, err := s.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(s.t, err)
		require.True(s.t, m.Event == "" || m.Event == "progress", "unexpected message after the end: %+v", m)
	}
}

// A client following a backfill from creation to succeeded gets every lifecycle event and
// the progress in between, in order, then the end of the stream. The hub's fallback poll is
// an hour: live events arrive by NOTIFY.
func TestEventStreamFollowsBackfillToSucceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withListenPoll(time.Hour))
	b := e.DailyBackfill("s1", day(1, 1), day(1, 3))
	s := evOpenStream(t, e, b.Id)

	// The created event and the first progress come in either order: the replay reads only
	// below the outbox's horizon, so an event that committed just before the stream opened
	// may come live, after the first progress, while an older transaction is in flight.
	var created evEvent
	var first *sseProgress
	for created.Type == "" || first == nil {
		m := s.must()
		switch {
		case m.Event == "progress" && first == nil:
			first = new(sseProgress)
			require.NoError(t, json.Unmarshal([]byte(m.Data), first))
		case m.Event != "" && m.Event != "progress":
			require.Empty(t, created.Type, "one event before the claims: %s", m.Data)
			created = s.decode(m)
		}
	}
	require.Equal(t, "backfill.created", created.Type)
	require.EqualValues(t, 3, first.Progress.Queued)
	require.Nil(t, first.EtaSeconds, "no run finished yet: no estimate")

	runs := e.ClaimWithN(3, map[string]any{"worker_id": "w", "dag_id": "s1", "limit": 3})
	s.UntilProgress(func(p sseProgress) bool { return p.Progress.Running == 3 })

	e.Clock.Advance(time.Minute)
	e.Report(runs[0], "success")
	p := s.UntilProgress(func(p sseProgress) bool { return p.Progress.Success == 1 })
	require.Nil(t, p.EtaSeconds, "one success gives no pace yet: eta_seconds needs 2")

	e.ActionOK(b.Id, "pause")
	paused := s.NextEvent()
	require.Equal(t, "backfill.paused", paused.Type)
	require.Equal(t, "user", *paused.Data.Reason)
	e.ActionOK(b.Id, "unpause")
	require.Equal(t, "backfill.unpaused", s.NextEvent().Type)

	e.Report(runs[1], "success")
	e.Report(runs[2], "success")
	s.UntilProgress(func(p sseProgress) bool { return p.Progress.Success == 3 })
	e.SweepOnce()
	done := s.NextEvent()
	require.Equal(t, "backfill.succeeded", done.Type)
	evRequireSnapshot(t, done, evGetRaw(e, b.Id))
	s.RequireEnd()

	// The events were sent in id order, as stored.
	stored := evOf(e, b.Id)
	require.Equal(t, []int64{stored[0].ID, stored[1].ID, stored[2].ID, stored[3].ID},
		[]int64{created.ID, paused.ID, stored[2].ID, done.ID})
}

// A reconnect with Last-Event-ID repeats nothing and misses nothing, whatever happened while
// the client was away; `after` does the same for clients that cannot set headers.
func TestEventStreamResumesAfterLastEventID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("s2", day(1, 1), day(1, 3))
	e.ActionOK(b.Id, "pause")

	s := evOpenStream(t, e, b.Id)
	require.Equal(t, "backfill.created", s.NextEvent().Type)
	paused := s.NextEvent()
	require.Equal(t, "backfill.paused", paused.Type)
	s.Close()

	e.ActionOK(b.Id, "unpause")
	e.ActionOK(b.Id, "cancel")

	s = evOpenStream(t, e, b.Id, "Last-Event-ID", strconv.FormatInt(paused.ID, 10))
	// Nothing runs: the cancel writes backfill.canceled alone.
	for _, want := range []string{"backfill.unpaused", "backfill.canceled"} {
		require.Equal(t, want, s.NextEvent().Type)
	}
	s.RequireEnd()

	// The same stream again, from the query: a terminal backfill's stream replays and ends,
	// and the whole answer matches the spec (e.Do checks it).
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events?after=%d", b.Id, paused.ID), nil,
		"Accept", "text/event-stream")
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, 2, strings.Count(string(res.Body), "\nevent: backfill."))
	require.NotContains(t, string(res.Body), "backfill.paused")

	// Nothing after the terminal event: the stream ends at once.
	res = e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events", b.Id), nil,
		"Accept", "text/event-stream", "Last-Event-ID", strconv.FormatInt(evOf(e, b.Id)[3].ID, 10))
	require.Equal(t, http.StatusOK, res.Status)
	require.Empty(t, string(res.Body))

	requireProblem(t, e.Do(http.MethodGet, "/api/v1/backfills/424242/events", nil, "Accept", "text/event-stream"),
		http.StatusNotFound, "backfill_not_found")
}

// Streams are bounded: beyond the limit the answer is 503 busy with Retry-After, and a
// closed stream frees its place. Shutdown ends open streams cleanly and refuses new ones.
func TestEventStreamLimitAndShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxStreams(2))
	b := e.DailyBackfill("s3", day(1, 1), day(1, 3))
	s1 := evOpenStream(t, e, b.Id)
	s1.NextEvent()
	s2 := evOpenStream(t, e, b.Id)
	s2.NextEvent()
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events", b.Id), nil, "Accept", "text/event-stream")
	requireProblem(t, res, http.StatusServiceUnavailable, "busy")
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	// JSON reads are not streams and are not limited.
	require.Equal(t, http.StatusOK, e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events", b.Id), nil).Status)

	s1.Close()
	// The server sees the client leave asynchronously: try until the place is free.
	var s3 *sseStream
	require.Eventually(t, func() bool {
		s3 = evTryStream(t, e, b.Id)
		return s3 != nil
	}, 10*time.Second, 10*time.Millisecond, "a closed stream frees its place")
	s3.NextEvent()
	e.Hub.EndStreams()
	s2.RequireEnd()
	s3.RequireEnd()
	requireProblem(t, e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events", b.Id), nil, "Accept", "text/event-stream"),
		http.StatusServiceUnavailable, "unavailable")
}

// A quiet stream sends a comment line at the keep-alive period.
func TestEventStreamKeepAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKeepAlive(50*time.Millisecond))
	b := e.DailyBackfill("s4", day(1, 1), day(1, 3))
	s := evOpenStream(t, e, b.Id)
	s.NextEvent()
	for {
		m := s.must()
		if m.Comment != "" {
			require.Equal(t, "keep-alive", m.Comment)
			return
		}
		require.Equal(t, "progress", m.Event)
	}
}

// A stream outlives the server's WriteTimeout (cmd/api sets 2 min for ordinary answers):
// keep-alives keep arriving well past it.
func TestEventStreamOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	// The server's WriteTimeout runs from the request's headers until the handler turns the
	// answer into a stream (startStream clears it); the subscription and the first reads come
	// before that. 300 ms keeps the test short on a quiet machine, but on a loaded one those
	// steps can take longer, and the stream is cut before it begins (EOF): the timeout is
	// scaled to the load, and the stream is read for more than three times it. The claim,
	// keep-alives arriving well past WriteTimeout, is the same at any scale.
	writeTimeout := patient(300 * time.Millisecond)
	e := newEnv(t, withWriteTimeout(writeTimeout), withKeepAlive(50*time.Millisecond))
	// Only the stream goes over HTTP. Every ordinary answer of this server must be written
	// within writeTimeout of its request, which a create (a SERIALIZABLE transaction) or a cancel
	// does not promise on a loaded machine (CI at load ~10 got EOF): the DAG, the backfill and
	// the cancel go to the store. What is under test is the stream.
	ctx := context.Background()
	_, _, err := e.Store.DagPut(ctx, repo.DagPutParams{DagID: "s6", Schedule: "@daily", Timezone: "UTC", MaxActiveRuns: 16})
	require.NoError(t, err)
	created, _, err := e.Store.BackfillCreate(ctx, domain.BackfillRequest{
		DagID: "s6", FromDate: day(1, 1), ToDate: day(1, 3), ReprocessBehavior: "none", MaxActiveRuns: 10})
	require.NoError(t, err)
	s := evOpenStream(t, e, created.ID)
	opened := time.Now()
	s.NextEvent()
	for time.Since(opened) < 3*writeTimeout+100*time.Millisecond {
		m := s.must()
		require.True(t, m.Comment == "keep-alive" || m.Event == "progress", "%+v", m)
	}
	canceled, err := e.Store.BackfillCancel(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, created.ID, canceled.ID)
	require.Equal(t, "backfill.canceled", s.NextEvent().Type, "nothing ran: canceled at once")
}

// Without LISTEN (a lost notification, a listener that cannot connect), polling still
// brings every event to the streams.
func TestEventStreamPollingFallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPollOnly(50*time.Millisecond))
	b := e.DailyBackfill("s5", day(1, 1), day(1, 3))
	s := evOpenStream(t, e, b.Id)
	require.Equal(t, "backfill.created", s.NextEvent().Type)
	e.ActionOK(b.Id, "pause")
	require.Equal(t, "backfill.paused", s.NextEvent().Type)
	e.ActionOK(b.Id, "cancel")
	require.Equal(t, "backfill.canceled", s.NextEvent().Type)
	s.RequireEnd()
}

// A stream opened on a terminal backfill while an older transaction of the database is still
// open: the terminal event has committed, but the outbox serves it only once that transaction
// ends. The stream waits for it and then ends, instead of ending at once without it (an
// audit, 2026-12-06: the stream sent only backfill.created and closed).
func TestEventStreamOfATerminalBackfillWaitsForItsHeldTerminalEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("held_other", "@daily", "UTC")
	b := e.DailyBackfill("held_terminal", day(1, 1), day(1, 3))

	hold := e.hold(`UPDATE dags SET max_active_runs = max_active_runs WHERE dag_id = 'held_other'`)
	require.Equal(t, "canceled", string(e.ActionOK(b.Id, "cancel").State), "nothing ran: canceled at once")

	s := evOpenStream(t, e, b.Id)
	type got struct {
		types []string
		err   error
	}
	done := make(chan got, 1)
	go func() {
		var g got
		for {
			m, err := s.Next()
			if err != nil {
				g.err = err
				done <- g
				return
			}
			if m.Event != "" && m.Event != "progress" {
				g.types = append(g.types, m.Event)
			}
		}
	}()
	select {
	case g := <-done:
		t.Fatalf("the stream ended while its terminal event was held back, after %v (%v)", g.types, g.err)
	case <-time.After(time.Second):
	}
	require.NoError(t, hold.Rollback())
	select {
	case g := <-done:
		require.ErrorIs(t, g.err, io.EOF, "the stream ended cleanly")
		require.Equal(t, []string{"backfill.created", "backfill.canceled"}, g.types)
	case <-time.After(20 * time.Second):
		t.Fatal("the terminal event never came once the older transaction ended")
	}
}

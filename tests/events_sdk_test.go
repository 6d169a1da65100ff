package tests

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// cutFirstStream is an HTTP doer that breaks the first event stream it carries right after
// its first event (a message with an id), as a dropped connection would.
type cutFirstStream struct {
	hc      *http.Client
	streams atomic.Int32
	resumed atomic.Value // the Last-Event-ID of the second stream request
}

func (d *cutFirstStream) Do(req *http.Request) (*http.Response, error) {
	stream := req.Header.Get("Accept") == "text/event-stream"
	n := int32(0)
	if stream {
		n = d.streams.Add(1)
		if n == 2 {
			d.resumed.Store(req.Header.Get("Last-Event-ID"))
		}
	}
	resp, err := d.hc.Do(req)
	if err != nil || n != 1 {
		return resp, err
	}
	resp.Body = &cutAfterFirstEvent{rc: resp.Body}
	return resp, nil
}

// cutAfterFirstEvent passes bytes through up to the end of the first message that carries
// an event id, then fails. Not simply the first message: the replay reads only below the
// outbox's horizon, so a stream may send its progress before events that committed just
// before it (a -race run beside a CPU hog, 2026-12-06: the progress came first, the cut
// fell before any event, and the resume rightly carried no Last-Event-ID).
type cutAfterFirstEvent struct {
	rc   io.ReadCloser
	seen bytes.Buffer
	cut  bool
}

func (c *cutAfterFirstEvent) Read(p []byte) (int, error) {
	if c.cut {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.rc.Read(p)
	c.seen.Write(p[:n])
	if end := endOfFirstEvent(c.seen.String()); end >= 0 {
		keep := n - (c.seen.Len() - end)
		c.cut = true
		return keep, nil
	}
	return n, err
}

func (c *cutAfterFirstEvent) Close() error { return c.rc.Close() }

// endOfFirstEvent is the offset just past the first complete message of stream that has an
// "id:" line, or -1 while there is none.
func endOfFirstEvent(stream string) int {
	start := 0
	for {
		i := strings.Index(stream[start:], "\n\n")
		if i < 0 {
			return -1
		}
		message := stream[start : start+i]
		if strings.HasPrefix(message, "id: ") || strings.Contains(message, "\nid: ") {
			return start + i + 2
		}
		start += i + 2
	}
}

// The Go SDK's FollowBackfill replays, follows live events to the terminal one, and resumes
// a dropped connection with Last-Event-ID: every event once, in order.
func TestSDKFollowBackfillResumesAndEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doer := &cutFirstStream{hc: e.specHTTP(t)}
	c, err := client.New(e.URL, "", client.WithHTTPClient(doer))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b := sdkBackfill(t, c, client.BackfillCreate{DagId: "sdk_ev", FromDate: day(1, 1), ToDate: day(1, 3)})
	_, err = c.PauseBackfill(ctx, b.Id)
	require.NoError(t, err)

	var types []client.EventType
	var ids []int64
	progress := 0
	for msg, err := range c.FollowBackfill(ctx, b.Id, 0) {
		require.NoError(t, err)
		if msg.Progress != nil {
			progress++
			continue
		}
		types = append(types, msg.Event.Type)
		ids = append(ids, msg.Event.Id)
		if msg.Event.Type == client.EventTypePaused {
			// Live from here: the replay is over once the paused event is in.
			_, err := c.UnpauseBackfill(ctx, b.Id)
			require.NoError(t, err)
			_, err = c.CancelBackfill(ctx, b.Id)
			require.NoError(t, err)
		}
	}
	// Nothing was running: the cancel ends the backfill in one transaction, and no reader could
	// have seen it canceling, so only backfill.canceled is written.
	require.Equal(t, []client.EventType{client.EventTypeCreated, client.EventTypePaused, client.EventTypeUnpaused,
		client.EventTypeCanceled}, types)
	require.EqualValues(t, 2, doer.streams.Load(), "the cut stream was resumed once")
	require.Equal(t, strconv.FormatInt(ids[0], 10), doer.resumed.Load(), "resumed after the one event it had")
	stored, err := c.ListEvents(ctx, &client.ListEventsParams{BackfillId: &b.Id})
	require.NoError(t, err)
	var want []int64
	for _, ev := range stored.Events {
		want = append(want, ev.Id)
	}
	require.Equal(t, want, ids)
	require.Positive(t, progress)

	// An unknown backfill is a permanent error, not something to resume.
	for _, err := range c.FollowBackfill(ctx, 999999, 0) {
		require.True(t, client.IsCode(err, client.ProblemCodeBackfillNotFound), "%v", err)
	}
}

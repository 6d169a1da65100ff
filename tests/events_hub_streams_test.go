package tests

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// scanCounter is the store with its reads of the outbox on behalf of requests and streams
// counted.
type scanCounter struct {
	*repo.Store
	scans atomic.Int64
}

func (s *scanCounter) EventScan(ctx context.Context, p repo.EventScanParams) (repo.EventScanPage, error) {
	s.scans.Add(1)
	return s.Store.EventScan(ctx, p)
}

// Filtered streams of GET /events read the outbox only to catch up: live, they keep what the
// replica's hub reads once for every stream. 24 streams of a type and of a backfill, open and
// quiet for a second, read the outbox not once more; a change then reaches each of them.
// Before, each re-read the outbox from its last match every 250 ms (24 streams: about 100
// reads a second, each from the last match to the end).
func TestFilteredEventStreamsReadNoOutboxWhileTheyFollow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("followed", day(1, 1), day(1, 3))
	counted := &scanCounter{Store: e.Store}
	h, err := handlers.New(handlers.Options{Store: counted, EventStreams: e.Hub})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(e.Hub.EndStreams) // before srv.Close waits for the streams
	front := *e
	front.URL, front.HTTP = srv.URL, srv.Client()

	const each = 12
	var streams []*sseStream
	for range each {
		streams = append(streams, evOpenAll(t, &front, "type=backfill.paused"))
		streams = append(streams, evOpenAll(t, &front, fmt.Sprintf("backfill_id=%d", b.Id)))
	}
	// Each stream's catch-up reads the outbox (nearly empty: once, or twice when the hub
	// was counting events as it subscribed) before it follows: until the count settles.
	prev := int64(-1)
	require.Eventually(t, func() bool {
		n := counted.scans.Load()
		settled := n == prev && n >= 2*each
		prev = n
		return settled
	}, 10*time.Second, 250*time.Millisecond)
	caughtUp := counted.scans.Load()
	time.Sleep(time.Second) // quiet: what a polling stream would read meanwhile
	quiet := counted.scans.Load() - caughtUp

	e.ActionOK(b.Id, "pause")
	for i, s := range streams {
		ev := s.NextEvent()
		if i%2 == 0 {
			require.Equal(t, "backfill.paused", ev.Type, "stream %d", i)
		} else {
			// The backfill's stream replayed its creation first.
			if ev.Type == "backfill.created" {
				ev = s.NextEvent()
			}
			require.Equal(t, "backfill.paused", ev.Type, "stream %d", i)
		}
	}
	t.Logf("%d streams: %d reads of the outbox to catch up, %d while following quietly for 1 s", 2*each, caughtUp, quiet)
	require.Zero(t, quiet, "reads of the outbox by streams that follow")
}

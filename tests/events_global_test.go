package tests

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// evOpenAll opens GET /events as a stream (query without '?'); headers in name, value pairs.
func evOpenAll(t *testing.T, e *env, query string, headers ...string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/api/v1/events?"+query, nil)
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

// The stream of every event carries all backfills' events in id order, does not end after a
// terminal event, resumes after Last-Event-ID without repeating or missing one, and keeps
// only what its filters ask for.
func TestGlobalEventStreamFollowsEveryBackfillAndResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.DailyBackfill("ga", day(1, 1), day(1, 3))
	b := e.DailyBackfill("gb", day(1, 1), day(1, 3))

	s := evOpenAll(t, e, "")
	first, second := s.NextEvent(), s.NextEvent()
	require.Equal(t, [2]int64{a.Id, b.Id}, [2]int64{first.BackfillID, second.BackfillID})
	require.Less(t, first.ID, second.ID)

	// Live: a cancel (terminal) of a, then b's pause: the stream goes on past a's end.
	e.ActionOK(a.Id, "cancel")
	e.ActionOK(b.Id, "pause")
	// Nothing of a's runs: its cancel writes backfill.canceled only.
	var seen []evEvent
	for len(seen) < 2 {
		seen = append(seen, s.NextEvent())
	}
	require.Equal(t, []string{"backfill.canceled", "backfill.paused"}, evTypes(seen))
	s.Close()

	// Resume after a's terminal event: the rest, then what happens next, nothing twice.
	e.ActionOK(b.Id, "unpause")
	s = evOpenAll(t, e, "", "Last-Event-ID", strconv.FormatInt(seen[0].ID, 10))
	var resumed []evEvent
	for len(resumed) < 2 {
		resumed = append(resumed, s.NextEvent())
	}
	require.Equal(t, []string{"backfill.paused", "backfill.unpaused"}, evTypes(resumed))
	require.Equal(t, seen[1].ID, resumed[0].ID)
	e.ActionOK(b.Id, "cancel")
	require.Equal(t, "backfill.canceled", s.NextEvent().Type)
	s.Close()

	// Filters: one DAG's events; one type across DAGs.
	s = evOpenAll(t, e, "dag_id=gb")
	for _, want := range []string{"backfill.created", "backfill.paused", "backfill.unpaused", "backfill.canceled"} {
		ev := s.NextEvent()
		require.Equal(t, want, ev.Type)
		require.Equal(t, "gb", ev.DagID)
	}
	s.Close()
	s = evOpenAll(t, e, "type=backfill.created")
	require.Equal(t, a.Id, s.NextEvent().BackfillID)
	require.Equal(t, b.Id, s.NextEvent().BackfillID)
	c := e.DailyBackfill("gc", day(1, 1), day(1, 3))
	ev := s.NextEvent()
	require.Equal(t, c.Id, ev.BackfillID, "a live event that passes the filter")
	require.Equal(t, "backfill.created", ev.Type)

	// The JSON page takes the DAG filter too, and its next_after moves past what it skipped.
	page := evList(e, "dag_id=ga&limit=1000")
	require.Equal(t, []string{"backfill.created", "backfill.canceled"}, evTypes(page.Events))
	all := evList(e, "limit=1000")
	require.Equal(t, all.NextAfter, page.NextAfter)
}

// GET /events streams share the stream limit and end at shutdown.
func TestGlobalEventStreamLimitAndShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxStreams(1))
	s := evOpenAll(t, e, "")
	res := e.Do(http.MethodGet, "/api/v1/events", nil, "Accept", "text/event-stream")
	requireProblem(t, res, http.StatusServiceUnavailable, "busy")
	e.Hub.EndStreams()
	s.RequireEnd()
}

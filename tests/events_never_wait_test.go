package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/webhooks"
	"github.com/stretchr/testify/require"
)

// answer is one PATCH's answer time and when it was sent.
type answer struct {
	sent time.Time
	took time.Duration
}

// patchLoop PATCHes backfill id (a new max_active_runs each time, so that each PATCH writes
// an event) until stop is closed, and sends the answer time of every PATCH, which must be 200.
func patchLoop(e *env, id int64, stop <-chan struct{}, answers chan<- answer) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		start := time.Now()
		res, err := e.do(http.MethodPatch, backfillPath(id), map[string]any{"max_active_runs": 1 + i%50})
		if err != nil {
			return fmt.Errorf("patch %d: %w", id, err)
		}
		if res.Status != http.StatusOK {
			return fmt.Errorf("patch %d answered %d: %s", id, res.Status, res.Body)
		}
		answers <- answer{start, time.Since(start)}
	}
}

// collect drains answers until the channel is closed.
func collect(answers <-chan answer) <-chan []answer {
	out := make(chan []answer, 1)
	go func() {
		var all []answer
		for a := range answers {
			all = append(all, a)
		}
		out <- all
	}()
	return out
}

// latencies are the sorted answer times of the answers sent in [from, to).
func latencies(all []answer, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, a := range all {
		if !a.sent.Before(from) && a.sent.Before(to) {
			out = append(out, a.took)
		}
	}
	slices.Sort(out)
	return out
}

// spread is "n PATCHes: p50, p99, max" of sorted latencies.
func spread(lats []time.Duration) string {
	if len(lats) == 0 {
		return "no PATCH"
	}
	return fmt.Sprintf("%d PATCHes: p50 %s, p99 %s, max %s", len(lats),
		lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1])
}

// A webhook with a million delivery attempts is deleted while 8 clients PATCH other
// backfills: the DELETE answers within 100 ms, every PATCH within 200 ms, also while the
// log is purged in the background, and the purge removes the whole log.
//
// Its bounds are wall-clock times, which the rest of the suite running beside it on a shared
// machine stretches (a 9 ms write past 200 ms), so it runs only when asked for, alone:
// `make test-timing` (BACKFILL_TIMING_TESTS=1).
func TestWebhookDeleteOfAMillionAttemptsHoldsNoWriterBack(t *testing.T) {
	requireTimingRun(t)
	e := newEnv(t)
	w := e.createWebhook("https://example.com/history")
	const events, attemptsPerEvent = 100_000, 10
	start := time.Now()
	// The history is fixture, not under test: written in one transaction with the foreign
	// key checks off (session_replication_role), the rows exactly as delivery leaves them:
	// one delivery per event, its attempts in the log. A transaction writes at most 4,096
	// events with ids of its own (migrations/00014), so the fixture names its ids: those of
	// transaction ids 0 to 24, which initdb's transactions had, long before this database
	// existed, so no writer of the test can take them, and which every reader sees as old.
	tx := e.DB.MustBegin()
	tx.MustExec(`SET LOCAL session_replication_role = replica`)
	tx.MustExec(`INSERT INTO outbox (id, type, backfill_id, dag_id, occurred_at, data)
		SELECT g, 'backfill.updated', g, 'history', backfill_now(), '{"backfill": {}}'
		FROM generate_series(1, $1) g`, events)
	tx.MustExec(`INSERT INTO webhook_deliveries (webhook_id, event_id, state, attempts, created_at, next_attempt_at)
		SELECT $1, id, 'pending', $2, backfill_now(), backfill_now() + interval '1 day'
		FROM outbox WHERE dag_id = 'history'`, w.Id, attemptsPerEvent)
	tx.MustExec(`INSERT INTO webhook_attempts (webhook_id, event_id, attempt, status_code, error, attempted_at)
		SELECT d.webhook_id, d.event_id, a, 500, 'http_status', backfill_now()
		FROM webhook_deliveries d CROSS JOIN generate_series(1, $1) a`, attemptsPerEvent)
	require.NoError(t, tx.Commit())
	require.Equal(t, events*attemptsPerEvent, e.Count(`SELECT count(*) FROM webhook_attempts WHERE webhook_id = $1`, w.Id))
	t.Logf("history: %d events, %d attempts, built in %s", events, events*attemptsPerEvent, time.Since(start).Round(time.Millisecond))

	const clients = 8
	ids := make([]int64, clients)
	for i := range ids {
		ids[i] = e.DailyBackfill(fmt.Sprintf("p%d", i), day(1, 1), day(1, 3)).Id
	}
	stop := make(chan struct{})
	answers := make(chan answer, 1024)
	all := collect(answers)
	writing := startTogether(clients, clients, func(i int) error { return patchLoop(e, ids[i], stop, answers) })

	// The writers alone first: what this machine gives them without the delete, for the
	// failure message, which then says whether the delete or the machine was slow.
	writersStart := time.Now()
	time.Sleep(2 * time.Second)
	delStart := time.Now()
	res := e.Do(http.MethodDelete, fmt.Sprintf("/api/v1/webhooks/%d", w.Id), nil)
	delTook := time.Since(delStart)
	require.Equal(t, http.StatusNoContent, res.Status, "body: %s", res.Body)

	// The purge runs beside the writers for 5 s, as each replica's deliverer runs it.
	d := e.newDeliverer(webhooks.Config{PurgeInterval: 50 * time.Millisecond})
	d.Start(context.Background())
	time.Sleep(5 * time.Second)
	close(stop)
	require.NoError(t, <-writing)
	d.Stop()
	close(answers)
	got := <-all
	alone := latencies(got, writersStart.Add(300*time.Millisecond), delStart) // under way
	lats := latencies(got, delStart, time.Now())
	purged := events*attemptsPerEvent - e.Count(`SELECT count(*) FROM webhook_attempts WHERE webhook_id = $1`, w.Id)
	require.Positive(t, purged, "the purge ran beside the writers")

	// The rest of the log goes the same way, without writers to time.
	_, err := e.newDeliverer(webhooks.Config{PurgeBatch: 10_000}).PurgeOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, w.Id))

	require.NotEmpty(t, lats)
	t.Logf("writers alone, %s", spread(alone))
	t.Logf("DELETE %s; while %d attempts were purged, %s", delTook.Round(time.Microsecond), purged, spread(lats))
	require.Less(t, delTook, 100*time.Millisecond, "DELETE /webhooks/{id} at a million attempts (writers alone: %s)", spread(alone))
	// Every PATCH within 200 ms, as the issue asks (a wait behind the delete would last as
	// long as the cascade did: seconds).
	require.Less(t, lats[len(lats)-1], 200*time.Millisecond, "every PATCH while the webhook is deleted and purged (writers alone: %s)", spread(alone))
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_attempts WHERE webhook_id = $1`, w.Id))
	require.Equal(t, len(got)+clients, e.Count(`SELECT count(*) FROM events WHERE dag_id LIKE 'p%'`),
		"every PATCH wrote its event (and every create its own)")
}

// A transaction that holds a webhook row for 5 s (and one that holds a backfill) delays no
// event writer of another backfill, and the held webhook still gets its deliveries.
func TestEventWritersDoNotWaitOnAHeldWebhookOrBackfill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/held")
	held := e.DailyBackfill("held", day(1, 1), day(1, 3))
	b := e.DailyBackfill("free", day(1, 1), day(1, 3))

	ctx := context.Background()
	tx := e.hold(fmt.Sprintf(`SELECT 1 FROM webhooks WHERE id = %d FOR UPDATE`, w.Id),
		fmt.Sprintf(`UPDATE backfills SET description = 'held' WHERE id = %d`, held.Id))

	holdUntil := time.Now().Add(5 * time.Second)
	var lats []time.Duration
	// Every write changes something, so that each writes one event: a description, or a
	// pause and an unpause in turn.
	paused := false
	for i := 0; time.Now().Before(holdUntil.Add(-200 * time.Millisecond)); i++ {
		start := time.Now()
		switch {
		case i%3 == 0:
			e.PatchBackfill(b.Id, map[string]any{"description": fmt.Sprintf("write %d", i)})
		case paused:
			e.ActionOK(b.Id, "unpause")
			paused = false
		default:
			e.ActionOK(b.Id, "pause")
			paused = true
		}
		lats = append(lats, time.Since(start))
	}
	// The deliveries are made while the webhook is still held: the fan-out reads webhooks
	// without a lock, and answers well within the second a wait would exceed.
	fanOutCtx, cancel := context.WithTimeout(ctx, time.Second)
	require.NoError(t, e.Store.WebhookFanOut(fanOutCtx), "the fan-out does not wait on a held webhook")
	cancel()
	time.Sleep(time.Until(holdUntil))
	require.NoError(t, tx.Commit())
	require.NoError(t, e.Store.WebhookFanOut(ctx))

	for i, l := range lats {
		if l > 100*time.Millisecond {
			t.Logf("write %d took %s", i, l)
		}
	}
	slices.Sort(lats)
	t.Logf("%d writes while a webhook and a backfill were held: p50 %s, max %s", len(lats), lats[len(lats)/2], lats[len(lats)-1])
	// A writer that waited on the held rows would take what is left of the 5 s hold: no write
	// may take a second. The contract's bound (200 ms, on the 99th percentile) is a wall-clock
	// time that the rest of the suite stretches on shared cores (a 9 ms write past 260 ms), so
	// it is checked when the test runs alone (make test-timing).
	require.Less(t, lats[len(lats)-1], time.Second, "no event writer waited on the held rows")
	if timingRun() {
		require.Less(t, lats[len(lats)*99/100], 200*time.Millisecond, "event writers beside held rows")
	}
	written := e.Count(`SELECT count(*) FROM events WHERE backfill_id = $1 AND type <> 'backfill.created'`, b.Id)
	require.Equal(t, len(lats), written)
	// Both creations, every write here, and the held backfill's update once it committed.
	require.Equal(t, 2+written+1, e.Count(`SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, w.Id),
		"the held webhook got a delivery of every event")
}

// hangingReceiver is an endpoint that never answers: each request is held until the
// client gives up or the test ends. It records the most requests it held at once.
type hangingReceiver struct {
	URL     string
	now     atomic.Int64
	maxSeen atomic.Int64
	total   atomic.Int64
}

func newHangingReceiver(t *testing.T) *hangingReceiver {
	h := &hangingReceiver{}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.total.Add(1)
		n := h.now.Add(1)
		defer h.now.Add(-1)
		for {
			m := h.maxSeen.Load()
			if n <= m || h.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: releases the held requests
	h.URL = srv.URL + "/hang"
	return h
}

// An endpoint that hangs beside a healthy one: the healthy one receives every event within
// 2 s of its commit, and the hanging one never holds more than WEBHOOK_CONCURRENCY attempts
// of a replica.
func TestWebhookHangingEndpointDelaysNoOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hang := newHangingReceiver(t)
	healthy := newUpdateTimer(t)
	e.createWebhook(hang.URL)
	e.createWebhook(healthy.URL)
	b := e.DailyBackfill("hh", day(1, 1), day(1, 3))

	const concurrency = 4
	d := e.newDeliverer(webhooks.Config{AllowLocal: true, Concurrency: concurrency, Interval: 200 * time.Millisecond})
	d.Start(context.Background())
	defer d.Stop()

	const events = 30
	worst := healthy.requireEachWithin2s(t, e, b.Id, events)
	t.Logf("healthy endpoint: %d events, worst lag %s; hanging endpoint: %d requests, at most %d at once",
		events, worst.Round(time.Millisecond), hang.total.Load(), hang.maxSeen.Load())
	require.LessOrEqual(t, hang.maxSeen.Load(), int64(concurrency), "the hanging endpoint's attempts in flight")
	require.Positive(t, hang.total.Load())
}

// More hanging endpoints than the replica's attempts in flight can hold at Concurrency each:
// a healthy endpoint created after them still receives every event within 2 s of its commit.
// Before, the hanging ones filled MaxInFlight and the replica claimed nothing until their
// attempts timed out (here 30 s).
func TestWebhookManyHangingEndpointsLeaveRoomForAHealthyOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const concurrency, maxInFlight, hanging = 4, 8, 3
	for range hanging {
		e.createWebhook(newHangingReceiver(t).URL)
	}
	healthy := newUpdateTimer(t)
	e.createWebhook(healthy.URL)
	b := e.DailyBackfill("many_hang", day(1, 1), day(1, 3))

	d := e.newDeliverer(webhooks.Config{AllowLocal: true, Concurrency: concurrency, MaxInFlight: maxInFlight,
		Timeout: 30 * time.Second, Interval: 200 * time.Millisecond})
	d.Start(context.Background())
	defer d.Stop()

	const events = 15
	worst := healthy.requireEachWithin2s(t, e, b.Id, events)
	t.Logf("%d hanging endpoints, MaxInFlight %d: the healthy one's worst lag %s", hanging, maxInFlight, worst.Round(time.Millisecond))
}

// A transaction that stays open for seconds holds no other writer's event back from the
// webhooks: while it holds a row of another backfill (so it has a transaction id older than
// every event written meanwhile), an endpoint receives each event within 2 s of its commit.
// The feed serves events in id order and waits for it (its promise is that order); the
// webhooks promise no order, and the fan-out takes what has committed.
func TestWebhookEventsAreNotHeldBackByALongTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rcv := newUpdateTimer(t)
	e.createWebhook(rcv.URL)
	held := e.DailyBackfill("lt-held", day(1, 1), day(1, 3))
	b := e.DailyBackfill("lt-free", day(1, 1), day(1, 3))

	ctx := context.Background()
	tx := e.hold(fmt.Sprintf(`UPDATE backfills SET description = 'held' WHERE id = %d`, held.Id))

	d := e.newDeliverer(webhooks.Config{AllowLocal: true, Interval: 200 * time.Millisecond})
	d.Start(context.Background())
	defer d.Stop()

	const events = 15
	worst := rcv.requireEachWithin2s(t, e, b.Id, events)
	var open bool
	require.NoError(t, tx.GetContext(ctx, &open, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`))
	require.True(t, open, "the long transaction was still open, with its transaction id")
	t.Logf("%d events beside a transaction held open: worst lag %s", events, worst.Round(time.Millisecond))
}

// A PATCH that changes nothing answers 200 with the backfill as it was: no event, and
// updated_at stays.
func TestPatchThatChangesNothingWritesNoEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("same", day(1, 1), day(1, 3), "description", "d")
	e.Clock.Advance(time.Minute)
	for _, body := range []map[string]any{{}, {"max_active_runs": b.MaxActiveRuns}, {"description": "d"}, {"max_failed_runs": nil}} {
		got := e.PatchBackfill(b.Id, body)
		require.True(t, got.UpdatedAt.Equal(b.UpdatedAt), "%v: updated_at moved", body)
	}
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM events WHERE backfill_id = $1`, b.Id), "only backfill.created")
	changed := e.PatchBackfill(b.Id, map[string]any{"description": "e"})
	require.True(t, changed.UpdatedAt.After(b.UpdatedAt))
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM events WHERE backfill_id = $1 AND type = 'backfill.updated'`, b.Id))
}

// requireTimingRun skips a test whose assertions are wall-clock bounds unless
// BACKFILL_TIMING_TESTS is set, as `make test-timing` sets it to run such tests one at a time.
func requireTimingRun(t *testing.T) {
	t.Helper()
	if !timingRun() {
		t.Skip("a wall-clock bound: run alone with make test-timing")
	}
}

// timingRun reports whether wall-clock bounds are checked in this run (make test-timing).
func timingRun() bool { return os.Getenv("BACKFILL_TIMING_TESTS") != "" }

// updateTimer is an endpoint that times each backfill.updated event from its commit to its
// arrival. The events are told apart by their snapshot's max_active_runs, which patchEvery
// sets to a new value for each.
type updateTimer struct {
	*receiver
	mu        sync.Mutex
	committed map[int]time.Time // max_active_runs → when its PATCH answered
	arrived   map[int]time.Time // max_active_runs → when its event arrived
}

func newUpdateTimer(t *testing.T) *updateTimer {
	u := &updateTimer{committed: map[int]time.Time{}, arrived: map[int]time.Time{}}
	u.receiver = newReceiver(t, func(_ int, r *http.Request) int {
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Backfill struct {
					MaxActiveRuns int `json:"max_active_runs"`
				} `json:"backfill"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&ev); err == nil && ev.Type == "backfill.updated" {
			u.mu.Lock()
			u.arrived[ev.Data.Backfill.MaxActiveRuns] = time.Now()
			u.mu.Unlock()
		}
		return http.StatusNoContent
	})
	return u
}

// patchEvery changes the backfill's max_active_runs n times, every gap, noting each commit.
func (u *updateTimer) patchEvery(e *env, backfillID int64, n int, gap time.Duration) {
	for i := range n {
		mar := 100 + i
		e.PatchBackfill(backfillID, map[string]any{"max_active_runs": mar})
		u.mu.Lock()
		u.committed[mar] = time.Now()
		u.mu.Unlock()
		time.Sleep(gap)
	}
}

// requireEachWithin2s makes n changes of the backfill, 100 ms apart, and requires each
// event at the endpoint within 2 s of its commit (the contract's bound); it answers the
// longest lag.
func (u *updateTimer) requireEachWithin2s(t *testing.T, e *env, backfillID int64, n int) time.Duration {
	t.Helper()
	u.patchEvery(e, backfillID, n, 100*time.Millisecond)
	u.requireAll(t, n, 10*time.Second, "the endpoint got every event")
	return u.requireLagUnder(t, 2*time.Second)
}

// requireAll waits up to within for n events to have arrived.
func (u *updateTimer) requireAll(t *testing.T, n int, within time.Duration, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return len(u.arrived) == n
	}, within, 20*time.Millisecond, msg)
}

// requireLagUnder checks that every event arrived within bound of its commit, and answers
// the longest lag.
func (u *updateTimer) requireLagUnder(t *testing.T, bound time.Duration) time.Duration {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	var worst time.Duration
	for mar, at := range u.committed {
		lag := u.arrived[mar].Sub(at)
		worst = max(worst, lag)
		require.Less(t, lag, bound, "event with max_active_runs %d", mar)
	}
	return worst
}

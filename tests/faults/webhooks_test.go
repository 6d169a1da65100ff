//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
)

// Events are inserted into the events table directly, as the outbox writer (built on
// another branch) does in each backfill change's transaction: delivery depends only on the
// committed rows.
func insertEvents(t testing.TB, db *sqlx.DB, n int) []int64 {
	t.Helper()
	var ids []int64
	err := db.Select(&ids, `
		INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		SELECT 'backfill.updated', g, 'faults', backfill_now(), jsonb_build_object('backfill', jsonb_build_object('id', g))
		FROM generate_series(1, $1) g
		RETURNING id`, n)
	if err != nil {
		t.Fatalf("insert events: %v", err)
	}
	return ids
}

// hookReceiver is a webhook endpoint in the test process. It verifies every request's
// signature with the SDK's verifier and counts the events it acknowledged (answered 2xx)
// by webhook-id; while hold is set it keeps requests open, without answering, until the
// sender goes away.
type hookReceiver struct {
	srv      *httptest.Server
	verifier atomic.Pointer[sdk.WebhookVerifier]
	hold     atomic.Bool
	held     atomic.Int64
	answer   func(n int) int

	mu       sync.Mutex
	requests int
	acked    map[string]int
	bad      []string
}

func newHookReceiver(t testing.TB, answer func(n int) int) *hookReceiver {
	h := &hookReceiver{acked: map[string]int{}, answer: answer}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	id := r.Header.Get("webhook-id")
	v := h.verifier.Load()
	h.mu.Lock()
	h.requests++
	n := h.requests
	if err != nil || v == nil {
		h.bad = append(h.bad, fmt.Sprintf("event %s: body %v, verifier %v", id, err, v != nil))
	} else if err := v.Verify(r.Header, body); err != nil {
		h.bad = append(h.bad, fmt.Sprintf("event %s: %v", id, err))
	}
	h.mu.Unlock()
	if h.hold.Load() {
		h.held.Add(1)
		<-r.Context().Done() // the sender died or gave up; nothing is acknowledged
		return
	}
	status := http.StatusOK
	if h.answer != nil {
		status = h.answer(n)
	}
	if status >= 200 && status < 300 {
		h.mu.Lock()
		h.acked[id]++
		h.mu.Unlock()
	}
	w.WriteHeader(status)
}

func (h *hookReceiver) snapshot() (acked map[string]int, requests int, bad []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	acked = make(map[string]int, len(h.acked))
	for k, v := range h.acked {
		acked[k] = v
	}
	return acked, h.requests, append([]string(nil), h.bad...)
}

// registerWebhook registers the receiver's hook URL and arms the receiver with the SDK's
// verifier for the webhook's secret, so that it checks every signature it gets.
func registerWebhook(t testing.TB, c *client, rc *hookReceiver) (id int64) {
	t.Helper()
	a := c.must(t, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": rc.srv.URL + "/hook"}, http.StatusCreated)
	w := decode[struct {
		ID     int64  `json:"id"`
		Secret string `json:"secret"`
	}](t, a)
	v, err := sdk.NewWebhookVerifier(w.Secret)
	if err != nil {
		t.Fatal(err)
	}
	rc.verifier.Store(v)
	return w.ID
}

// waitDelivered polls the database until every delivery is delivered and answers how long
// that took.
func waitDelivered(t testing.TB, db *sqlx.DB, want int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var delivered int
		if err := db.Get(&delivered, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`); err != nil {
			t.Fatal(err)
		}
		if delivered == want {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%d of %d deliveries delivered after %s", delivered, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKillDuringWebhookDelivery sends SIGKILL to the server while attempts are in flight
// (the receiver holds them open), writes more events while no server runs, and restarts it.
// Every event then reaches the receiver at least once, every request's signature verifies,
// and the log shows the killed attempts for what they are.
func TestKillDuringWebhookDelivery(t *testing.T) {
	const before, whileDown = 40, 10
	tdb := newTestDB(t)
	rc := newHookReceiver(t, nil)
	rc.hold.Store(true)
	srv := startProc(t, "bf_wh_kill", tdb.DSN, "WEBHOOK_ALLOW_LOCAL=true")
	c := newClient(srv.URL, false)
	hookID := registerWebhook(t, c, rc)
	ids := insertEvents(t, tdb.DB, before)

	// Kill once attempts are in flight at the receiver (the deliverer runs 8 at a time).
	deadline := time.Now().Add(30 * time.Second)
	for rc.held.Load() < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d attempts reached the receiver within 30 s", rc.held.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Kill()
	heldAtKill := rc.held.Load()
	ids = append(ids, insertEvents(t, tdb.DB, whileDown)...)
	rc.hold.Store(false)

	srv2 := startProc(t, "bf_wh_kill_restarted", tdb.DSN, "WEBHOOK_ALLOW_LOCAL=true")
	took := waitDelivered(t, tdb.DB, len(ids), 120*time.Second)

	acked, requests, bad := rc.snapshot()
	if len(bad) > 0 {
		t.Fatalf("%d requests failed verification: %v", len(bad), bad)
	}
	for _, id := range ids {
		if acked[strconv.FormatInt(id, 10)] == 0 {
			t.Errorf("event %d was never delivered", id)
		}
	}
	if len(acked) != len(ids) {
		t.Errorf("acknowledged %d distinct events, want %d", len(acked), len(ids))
	}
	// The attempts the kill cut off stay in the log with no answer, closed as timeouts when
	// the restarted server claimed their deliveries again (after the claim's lease ran out).
	var lost int
	if err := tdb.DB.Get(&lost, `SELECT count(*) FROM webhook_attempts WHERE status_code IS NULL AND error = 'timeout'`); err != nil {
		t.Fatal(err)
	}
	if lost < int(heldAtKill) {
		t.Errorf("%d attempts without outcome in the log, want at least the %d held at the kill", lost, heldAtKill)
	}
	log := decode[struct {
		Deliveries []struct {
			DeliveredAt *time.Time `json:"delivered_at"`
		} `json:"deliveries"`
		Total int `json:"total_entries"`
	}](t, newClient(srv2.URL, false).must(t, http.MethodGet, fmt.Sprintf("/api/v1/webhooks/%d/deliveries?limit=1000", hookID), nil, 200))
	delivered := 0
	for _, d := range log.Deliveries {
		if d.DeliveredAt != nil {
			delivered++
		}
	}
	if delivered != len(ids) {
		t.Errorf("the log shows %d delivering attempts, want one per event (%d)", delivered, len(ids))
	}
	dups := 0
	for _, n := range acked {
		dups += n - 1
	}
	t.Logf("%d events (%d written while no server ran); %d attempts held at the kill; all delivered %s after the restart; "+
		"%d requests, %d duplicate acknowledgements; %d log entries, %d without outcome",
		len(ids), whileDown, heldAtKill, took.Round(100*time.Millisecond), requests, dups, log.Total, lost)
}

// TestWebhookThirdAttemptAfterTwo500s runs the real server against a receiver that answers
// 500 twice and then 200: it gets the event on the third attempt, and GET
// /webhooks/{id}/deliveries shows all three. The database clock is stopped and moved to
// each next_attempt_at instead of waiting the backoff out.
func TestWebhookThirdAttemptAfterTwo500s(t *testing.T) {
	tdb := newTestDB(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	if err := pgtest.SetClock(ctx, tdb.DB, now); err != nil {
		t.Fatal(err)
	}
	rc := newHookReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	srv := startProc(t, "bf_wh_retry", tdb.DSN, "WEBHOOK_ALLOW_LOCAL=true")
	c := newClient(srv.URL, false)
	hookID := registerWebhook(t, c, rc)
	id := insertEvents(t, tdb.DB, 1)[0]

	type attempt struct {
		EventID       int64      `json:"event_id"`
		Attempt       int        `json:"attempt"`
		StatusCode    *int       `json:"status_code"`
		Error         *string    `json:"error"`
		NextAttemptAt *time.Time `json:"next_attempt_at"`
		DeliveredAt   *time.Time `json:"delivered_at"`
	}
	// logOf waits until the log holds n attempts whose outcome is recorded.
	logOf := func(n int) []attempt {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			l := decode[struct {
				Deliveries []attempt `json:"deliveries"`
			}](t, c.must(t, http.MethodGet, fmt.Sprintf("/api/v1/webhooks/%d/deliveries", hookID), nil, 200))
			if len(l.Deliveries) == n && l.Deliveries[n-1].StatusCode != nil {
				return l.Deliveries
			}
			if time.Now().After(deadline) {
				t.Fatalf("the log did not reach %d recorded attempts within 30 s: %+v", n, l.Deliveries)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	l := logOf(1)
	if err := pgtest.SetClock(ctx, tdb.DB, *l[0].NextAttemptAt); err != nil {
		t.Fatal(err)
	}
	l = logOf(2)
	if err := pgtest.SetClock(ctx, tdb.DB, *l[1].NextAttemptAt); err != nil {
		t.Fatal(err)
	}
	l = logOf(3)

	for i, a := range l {
		if a.EventID != id || a.Attempt != i+1 {
			t.Errorf("log entry %d: event %d attempt %d, want event %d attempt %d", i, a.EventID, a.Attempt, id, i+1)
		}
	}
	if *l[0].StatusCode != 500 || *l[1].StatusCode != 500 || *l[2].StatusCode != 200 {
		t.Errorf("statuses %d %d %d, want 500 500 200", *l[0].StatusCode, *l[1].StatusCode, *l[2].StatusCode)
	}
	if l[0].DeliveredAt != nil || l[1].DeliveredAt != nil || l[2].DeliveredAt == nil || l[2].NextAttemptAt != nil {
		t.Errorf("only the third attempt delivered: %+v", l)
	}
	first, second := l[0].NextAttemptAt.Sub(now), l[1].NextAttemptAt.Sub(*l[0].NextAttemptAt)
	if first > 10*time.Second || second <= first {
		t.Errorf("retry delays %s then %s: want the first within 10 s and growing", first, second)
	}
	acked, requests, bad := rc.snapshot()
	if len(bad) > 0 || requests != 3 || acked[strconv.FormatInt(id, 10)] != 1 {
		t.Errorf("receiver: %d requests, acknowledged %v, failed verification %v", requests, acked, bad)
	}
	t.Logf("attempts: %d, %d, %d; retry delays %s, %s", *l[0].StatusCode, *l[1].StatusCode, *l[2].StatusCode, first, second)
}

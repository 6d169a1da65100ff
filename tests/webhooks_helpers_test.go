package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/metrics"
	"github.com/backfillsvc/backfill/webhooks"
	"github.com/stretchr/testify/require"
)

// insertEvent writes an events row as the outbox writer does: in its own committed
// transaction, at the database's clock. The writer (triggers on backfills) is built on
// another branch; until it lands these tests write the rows themselves, which is all that
// delivery depends on: the trigger on events makes the deliveries.
func (e *env) insertEvent(typ string, backfillID int64, dagID string) int64 {
	e.t.Helper()
	var id int64
	require.NoError(e.t, e.DB.Get(&id, `
		INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		VALUES ($1, $2, $3, backfill_now(), jsonb_build_object('backfill',
			jsonb_build_object('id', $2::bigint, 'dag_id', $3::text, 'state', 'running', 'big', 9007199254740993)))
		RETURNING id`, typ, backfillID, dagID))
	return id
}

// deliverer is a webhook deliverer over the env's store, as each replica runs one; its
// metrics go to a registry of its own.
type deliverer struct {
	*webhooks.Deliverer
	metrics *metrics.Metrics
}

func (e *env) newDeliverer(cfg webhooks.Config) *deliverer {
	m := metrics.New()
	if cfg.Observer == nil {
		cfg.Observer = m
	}
	return &deliverer{Deliverer: webhooks.New(e.Store, cfg), metrics: m}
}

// outcomes is a webhooks.Observer that hands every attempt's outcome to the test, once it
// is recorded.
type outcomes chan string

func (o outcomes) WebhookAttempted(outcome string) { o <- outcome }
func (o outcomes) WebhookDelivered(time.Duration)  {}

// localDeliverer may reach the test's receivers on 127.0.0.1 (WEBHOOK_ALLOW_LOCAL=true).
func (e *env) localDeliverer() *deliverer {
	return e.newDeliverer(webhooks.Config{AllowLocal: true})
}

// RunOnce runs one delivery pass and fails the test on error.
func (d *deliverer) runOnce(t testing.TB) {
	t.Helper()
	require.NoError(t, d.RunOnce(context.Background()))
}

// metric reads one sample of the deliverer's metrics in the Prometheus text format.
func (d *deliverer) metric(t testing.TB, name string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

// createWebhook registers a webhook (201) and returns it with its secret.
func (e *env) createWebhook(url string, eventTypes ...string) api.WebhookWithSecret {
	e.t.Helper()
	body := map[string]any{"url": url}
	if len(eventTypes) > 0 {
		body["event_types"] = eventTypes
	}
	res := e.Do(http.MethodPost, "/api/v1/webhooks", body)
	require.Equal(e.t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var w api.WebhookWithSecret
	res.Decode(e.t, &w)
	return w
}

// webhookLog reads a webhook's delivery log, every attempt in order.
func (e *env) webhookLog(id int64) []api.WebhookDelivery {
	e.t.Helper()
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/webhooks/%d/deliveries?limit=1000", id), nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var page api.WebhookDeliveryCollection
	res.Decode(e.t, &page)
	require.EqualValues(e.t, len(page.Deliveries), page.TotalEntries)
	return page.Deliveries
}

// delivery is one request a receiver got.
type delivery struct {
	Header http.Header
	Body   []byte
}

// receiver is a webhook endpoint on 127.0.0.1 that records every request and answers with
// the status answer gives for the nth request (1-based).
type receiver struct {
	URL    string
	mu     sync.Mutex
	got    []delivery
	answer func(n int, r *http.Request) int
}

// newHookedEnv is an env with one webhook, for every event type, whose target is a new
// receiver answering as answer does (nil: 204).
func newHookedEnv(t *testing.T, answer func(n int, r *http.Request) int) (*env, *receiver, api.WebhookWithSecret) {
	t.Helper()
	e := newEnv(t)
	rc := newReceiver(t, answer)
	return e, rc, e.createWebhook(rc.URL)
}

func newReceiver(t testing.TB, answer func(n int, r *http.Request) int) *receiver {
	rc := &receiver{answer: answer}
	if rc.answer == nil {
		rc.answer = func(int, *http.Request) int { return http.StatusNoContent }
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, delivery{Header: r.Header.Clone(), Body: body})
		n := len(rc.got)
		rc.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		w.WriteHeader(rc.answer(n, r))
	}))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL + "/hook"
	return rc
}

// Got returns the requests so far.
func (rc *receiver) Got() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// advanceTo moves the database clock forward to t (and past it by a millisecond, since
// due means next_attempt_at <= now).
func (e *env) advanceTo(t time.Time) {
	e.t.Helper()
	if d := t.Sub(e.Clock.Now()); d > 0 {
		e.Clock.Advance(d + time.Millisecond)
	}
}

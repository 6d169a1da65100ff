package tests

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/webhooks"
	"github.com/stretchr/testify/require"
)

// Without WEBHOOK_ALLOW_LOCAL, targets that resolve to loopback, link-local or unspecified
// addresses are refused on the address dialed: a host name that resolves to 127.0.0.1 is
// refused as surely as the literal. The refusal is a failed attempt, logged and retried.
func TestWebhookRefusesLocalTargetsUnlessAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, nil)
	u, err := url.Parse(rc.URL)
	require.NoError(t, err)
	targets := map[string]string{
		rc.URL:                                   "loopback",
		"http://localhost:" + u.Port() + "/hook": "loopback",
		"http://169.254.169.254/latest/meta-data/": "link-local",
		"http://[fe80::1]:" + u.Port() + "/":       "link-local",
		"http://0.0.0.0:" + u.Port() + "/hook":     "unspecified",
		"http://[::]:" + u.Port() + "/hook":        "unspecified",
	}
	ids := map[int64]string{}
	for target := range targets {
		ids[e.createWebhook(target).Id] = target
	}
	e.insertEvent("backfill.created", 1, "d")

	guarded := e.newDeliverer(webhooks.Config{})
	guarded.runOnce(t)
	require.Empty(t, rc.Got(), "nothing reached the local receiver")
	for id, target := range ids {
		log := e.webhookLog(id)
		require.Len(t, log, 1, target)
		require.Nil(t, log[0].StatusCode, target)
		require.Equal(t, "refused_address", string(*log[0].Error), target)
		require.NotNil(t, log[0].NextAttemptAt, "%s: a refusal is retried like any failure", target)
		require.Nil(t, log[0].DeliveredAt)
	}

	// The same deliveries with WEBHOOK_ALLOW_LOCAL=true reach the receiver by all four names
	// that lead to it: 127.0.0.1, localhost, and the unspecified 0.0.0.0 and [::], which
	// Linux connects to the local host, the reason they are refused.
	e.Clock.Advance(time.Minute)
	e.localDeliverer().runOnce(t)
	require.Len(t, rc.Got(), 4)
}

// A 3xx is a failed attempt: the redirect is not followed.
func TestWebhookDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	elsewhere := newReceiver(t, nil)
	var redirected atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Add(1)
		http.Redirect(w, r, elsewhere.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	w := e.createWebhook(front.URL + "/hook")
	e.insertEvent("backfill.created", 1, "d")
	e.localDeliverer().runOnce(t)
	require.EqualValues(t, 1, redirected.Load())
	require.Empty(t, elsewhere.Got(), "the redirect was not followed")
	log := e.webhookLog(w.Id)
	require.Len(t, log, 1)
	require.EqualValues(t, http.StatusTemporaryRedirect, *log[0].StatusCode)
	require.Equal(t, "http_status", string(*log[0].Error))
	require.NotNil(t, log[0].NextAttemptAt)
}

// An answer that does not come within the time limit is a failed attempt.
func TestWebhookAttemptTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rc := newReceiver(t, func(_ int, r *http.Request) int {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return http.StatusOK
	})
	w := e.createWebhook(rc.URL)
	e.insertEvent("backfill.created", 1, "d")
	e.newDeliverer(webhooks.Config{AllowLocal: true, Timeout: 300 * time.Millisecond}).runOnce(t)
	log := e.webhookLog(w.Id)
	require.Len(t, log, 1)
	require.Nil(t, log[0].StatusCode)
	require.Equal(t, "timeout", string(*log[0].Error))
	require.NotNil(t, log[0].NextAttemptAt)
}

// An event written while its webhook is being deleted: neither waits for the other. The
// event's writer never reads webhooks (the deliverer makes deliveries from committed events),
// the delete only marks the webhook and answers while that transaction is still open, and the
// event, and the change it reports, commit without error. The event committed after the
// delete: no delivery is made of it, and nothing is attempted.
func TestWebhookDeleteDoesNotWaitForAnEventThatMatchedIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/h")
	tx, err := e.DB.Beginx()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var eventID int64
	require.NoError(t, tx.Get(&eventID, `INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		VALUES ('backfill.created', 1, 'd', backfill_now(), '{}') RETURNING id`))

	res := e.Do(http.MethodDelete, fmt.Sprintf("/api/v1/webhooks/%d", w.Id), nil)
	require.Equal(t, http.StatusNoContent, res.Status, "answered while the event's transaction is open")
	require.NoError(t, tx.Commit())

	e.localDeliverer().runOnce(t)
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_deliveries`), "no delivery to a webhook deleted before the event committed")
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_attempts`), "a deleted webhook is never attempted")
	var events int
	require.NoError(t, e.DB.Get(&events, `SELECT count(*) FROM events WHERE id = $1`, eventID))
	require.Equal(t, 1, events)
}

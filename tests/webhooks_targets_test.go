package tests

import (
	"context"
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
		require.Equal(t, "refused_address", *log[0].Error, target)
		require.Contains(t, *log[0].Error, targets[target]+" address", target)
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
	require.Equal(t, "http_status", *log[0].Error)
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
	require.Equal(t, "timeout", *log[0].Error)
	require.NotNil(t, log[0].NextAttemptAt)
}

// An event written while its webhook is being deleted: the event's transaction holds the
// webhook (FOR KEY SHARE), the delete waits for it and then removes the delivery it made;
// the event, and the change it reports, commit without error.
func TestWebhookDeleteWaitsForAnEventThatMatchedIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/h")
	tx, err := e.DB.Beginx()
	require.NoError(t, err)
	var eventID int64
	require.NoError(t, tx.Get(&eventID, `INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		VALUES ('backfill.created', 1, 'd', backfill_now(), '{}') RETURNING id`))

	deleted := make(chan *response, 1)
	go func() {
		res, err := e.do(http.MethodDelete, fmt.Sprintf("/api/v1/webhooks/%d", w.Id), nil)
		if err != nil {
			t.Errorf("delete: %v", err)
		}
		deleted <- res
	}()
	waitForLockWait(t, e, "DELETE FROM webhooks")
	select {
	case <-deleted:
		t.Fatal("the delete did not wait for the event's transaction")
	default:
	}
	require.NoError(t, tx.Commit())
	res := <-deleted
	require.Equal(t, http.StatusNoContent, res.Status)

	var events, deliveries int
	require.NoError(t, e.DB.Get(&events, `SELECT count(*) FROM events WHERE id = $1`, eventID))
	require.NoError(t, e.DB.Get(&deliveries, `SELECT count(*) FROM webhook_deliveries`))
	require.Equal(t, 1, events)
	require.Zero(t, deliveries)
}

// waitForLockWait polls pg_stat_activity until a statement starting with prefix waits on a
// lock. Polling the database is the observation itself here, not a wait for background work.
func waitForLockWait(t *testing.T, e *env, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var n int
		require.NoError(t, e.DB.GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1 || '%'`, prefix))
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q waited on a lock within 30 s", prefix)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

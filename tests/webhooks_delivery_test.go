package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/webhooks"
	"github.com/stretchr/testify/require"
)

// The events these tests deliver are inserted directly (insertEvent): the outbox writer is
// built on another branch, and delivery depends only on the events rows.

func TestWebhookDeliversTheEventSignedPerStandardWebhooks(t *testing.T) {
	t.Parallel()
	e, rc, w := newHookedEnv(t, nil)
	id := e.insertEvent("backfill.created", 42, "sales")
	d := e.localDeliverer()
	d.runOnce(t)

	got := rc.Got()
	require.Len(t, got, 1)
	h, body := got[0].Header, got[0].Body
	require.Equal(t, strconv.FormatInt(id, 10), h.Get("webhook-id"), "webhook-id is the event id")
	require.Equal(t, strconv.FormatInt(e.Clock.Now().Unix(), 10), h.Get("webhook-timestamp"), "the database clock, in Unix seconds")
	require.Regexp(t, `^v1,[A-Za-z0-9+/]{43}=$`, h.Get("webhook-signature"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.NoError(t, client.VerifyWebhook(w.Secret, h, body), "the SDK's verifier accepts it")
	other := e.createWebhook("https://example.com/other")
	require.ErrorIs(t, client.VerifyWebhook(other.Secret, h, body), client.ErrWebhookSignature, "another webhook's secret does not")

	var ev domain.Event // the one event document, as GET /events answers it
	require.NoError(t, json.Unmarshal(body, &ev))
	require.Equal(t, id, ev.ID)
	require.Equal(t, domain.EventBackfillCreated, ev.Type)
	require.EqualValues(t, 42, ev.BackfillID)
	require.Equal(t, "sales", ev.DagID)
	require.True(t, ev.OccurredAt.Equal(e.Clock.Now()))
	// The stored jsonb, exactly: 2^53+1 keeps its last digit.
	require.JSONEq(t, `{"backfill": {"id": 42, "dag_id": "sales", "state": "running", "big": 9007199254740993}}`, string(ev.Data))
	require.Contains(t, string(ev.Data), "9007199254740993")

	log := e.webhookLog(w.Id)
	require.Len(t, log, 1)
	require.Equal(t, id, log[0].EventId)
	require.EqualValues(t, 1, log[0].Attempt)
	require.EqualValues(t, http.StatusNoContent, *log[0].StatusCode)
	require.Nil(t, log[0].Error)
	require.Nil(t, log[0].NextAttemptAt)
	require.NotNil(t, log[0].DeliveredAt)
	require.True(t, log[0].AttemptedAt.Equal(e.Clock.Now()))

	d.runOnce(t)
	require.Len(t, rc.Got(), 1, "a delivered event is not sent again")
	require.Equal(t, "1", d.metric(t, `backfill_webhook_deliveries_total{outcome="delivered"}`))
	require.Equal(t, "1", d.metric(t, "backfill_webhook_delivery_lag_seconds_count"))
}

// A receiver that answers 500 twice and then 200 gets the event on the third attempt; the
// log shows all three, and the retries come after growing delays, the first within 10 s.
func TestWebhookReceiverFailingTwiceGetsTheEventOnTheThirdAttempt(t *testing.T) {
	t.Parallel()
	e, rc, w := newHookedEnv(t, func(n int, _ *http.Request) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	id := e.insertEvent("backfill.failed", 7, "d")
	d := e.localDeliverer()
	start := e.Clock.Now()

	d.runOnce(t)
	log := e.webhookLog(w.Id)
	require.Len(t, log, 1)
	first := log[0].NextAttemptAt.Sub(log[0].AttemptedAt)
	require.Greater(t, first, time.Duration(0))
	require.LessOrEqual(t, first, 10*time.Second, "the first retry comes within 10 s")
	d.runOnce(t)
	require.Len(t, rc.Got(), 1, "not due before next_attempt_at")

	e.advanceTo(*log[0].NextAttemptAt)
	d.runOnce(t)
	log = e.webhookLog(w.Id)
	require.Len(t, log, 2)
	second := log[1].NextAttemptAt.Sub(log[1].AttemptedAt)
	require.Greater(t, second, first, "the delays grow")

	e.advanceTo(*log[1].NextAttemptAt)
	d.runOnce(t)
	d.runOnce(t)

	got := rc.Got()
	require.Len(t, got, 3)
	for _, g := range got {
		require.Equal(t, strconv.FormatInt(id, 10), g.Header.Get("webhook-id"), "every attempt carries the same webhook-id")
		require.NoError(t, client.VerifyWebhook(w.Secret, g.Header, g.Body))
		require.JSONEq(t, string(got[0].Body), string(g.Body))
	}
	log = e.webhookLog(w.Id)
	require.Len(t, log, 3)
	for i, a := range log {
		require.Equal(t, id, a.EventId)
		require.EqualValues(t, i+1, a.Attempt)
	}
	require.EqualValues(t, 500, *log[0].StatusCode)
	require.EqualValues(t, 500, *log[1].StatusCode)
	require.EqualValues(t, 200, *log[2].StatusCode)
	require.Equal(t, "http_status", string(*log[0].Error), "the kind of failure; status_code says which")
	require.NotNil(t, log[0].NextAttemptAt)
	require.NotNil(t, log[1].NextAttemptAt)
	require.Nil(t, log[0].DeliveredAt)
	require.Nil(t, log[2].Error)
	require.Nil(t, log[2].NextAttemptAt)
	require.NotNil(t, log[2].DeliveredAt)
	require.True(t, log[2].DeliveredAt.After(start))

	require.Equal(t, "2", d.metric(t, `backfill_webhook_deliveries_total{outcome="retry"}`))
	require.Equal(t, "1", d.metric(t, `backfill_webhook_deliveries_total{outcome="delivered"}`))
	lag := d.metric(t, "backfill_webhook_delivery_lag_seconds_sum")
	lagSecs, err := strconv.ParseFloat(lag, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, lagSecs, (first + second).Seconds(), "the lag counts the retries' waits")
}

// A receiver that never answers 2xx is retried for at least 24 h, then given up.
func TestWebhookIsRetriedForADayThenGivenUp(t *testing.T) {
	t.Parallel()
	e, rc, w := newHookedEnv(t, func(int, *http.Request) int { return http.StatusServiceUnavailable })
	e.insertEvent("backfill.canceled", 1, "d")
	d := e.localDeliverer()
	start := e.Clock.Now()
	for range 50 {
		d.runOnce(t)
		log := e.webhookLog(w.Id)
		last := log[len(log)-1]
		if last.NextAttemptAt == nil {
			break
		}
		e.advanceTo(*last.NextAttemptAt)
	}
	log := e.webhookLog(w.Id)
	last := log[len(log)-1]
	require.Nil(t, last.NextAttemptAt, "given up after %d attempts", len(log))
	require.Nil(t, last.DeliveredAt)
	require.GreaterOrEqual(t, last.AttemptedAt.Sub(start), 24*time.Hour, "the last attempt is at least 24 h after the first")
	require.Len(t, rc.Got(), len(log), "every attempt reached the receiver and is logged")
	var state string
	require.NoError(t, e.DB.Get(&state, `SELECT state FROM webhook_deliveries`))
	require.Equal(t, "failed", state)
	require.Equal(t, "1", d.metric(t, `backfill_webhook_deliveries_total{outcome="gave_up"}`))

	e.Clock.Advance(72 * time.Hour)
	d.runOnce(t)
	require.Len(t, rc.Got(), len(log), "a given-up delivery is not tried again")
}

func TestWebhookGetsOnlyItsEventTypesAndOnlyEventsAfterItsCreation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := newReceiver(t, nil)
	early := e.insertEvent("backfill.created", 1, "d")
	wAll := e.createWebhook(all.URL)
	onlyEnd := newReceiver(t, nil)
	wEnd := e.createWebhook(onlyEnd.URL, "backfill.succeeded", "backfill.canceled")
	ids := []int64{
		e.insertEvent("backfill.created", 2, "d"),
		e.insertEvent("backfill.paused", 2, "d"),
		e.insertEvent("backfill.canceled", 2, "d"),
	}
	e.localDeliverer().runOnce(t)

	idsOf := func(rc *receiver) []string {
		var out []string
		for _, g := range rc.Got() {
			out = append(out, g.Header.Get("webhook-id"))
		}
		return out
	}
	require.ElementsMatch(t, []string{strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[1], 10), strconv.FormatInt(ids[2], 10)}, idsOf(all),
		"event %d was written before the webhook existed", early)
	require.Equal(t, []string{strconv.FormatInt(ids[2], 10)}, idsOf(onlyEnd))
	require.Len(t, e.webhookLog(wAll.Id), 3)
	require.Len(t, e.webhookLog(wEnd.Id), 1)
}

// Transaction ids do not commit in order: an event can commit before a webhook exists while
// an older transaction is still open. The horizon at the webhook's creation sits at that
// older transaction, below the event, so the horizon alone would deliver the event (as CI
// saw once, 2026-12-06: the older transaction was another database's, ending between the
// snapshot and the horizon's read of pg_stat_activity). The webhook's own snapshot says which
// events committed before it.
func TestWebhookIsNotDeliveredAnEventThatCommittedBeforeItBesideAnOlderOpenTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	older, err := e.DB.Beginx()
	require.NoError(t, err)
	defer func() { _ = older.Rollback() }()
	var olderXid int64
	require.NoError(t, older.Get(&olderXid, `SELECT pg_current_xact_id()::text::bigint`))

	before := e.insertEvent("backfill.created", 1, "d")
	rc := newReceiver(t, nil)
	w := e.createWebhook(rc.URL)
	after := e.insertEvent("backfill.paused", 1, "d")
	require.Less(t, olderXid<<12, before, "the open transaction is older than the event")
	require.NoError(t, older.Rollback())

	e.localDeliverer().runOnce(t)
	var got []string
	for _, g := range rc.Got() {
		got = append(got, g.Header.Get("webhook-id"))
	}
	require.Equal(t, []string{strconv.FormatInt(after, 10)}, got,
		"event %d committed before the webhook existed", before)
	require.Len(t, e.webhookLog(w.Id), 1)
}

// An event whose transaction rolls back owes no delivery. The writer makes none (the
// deliverer makes them from committed events only), and the fan-out after the rollback finds
// nothing to deliver.
func TestWebhookDeliveryIsMadeOnlyWithACommittedEvent(t *testing.T) {
	t.Parallel()
	e, rc, _ := newHookedEnv(t, nil)
	tx, err := e.DB.Beginx()
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		VALUES ('backfill.created', 1, 'd', backfill_now(), '{}')`)
	require.NoError(t, err)
	var inTx int
	require.NoError(t, tx.Get(&inTx, `SELECT count(*) FROM webhook_deliveries`))
	require.Zero(t, inTx, "the event's writer makes no delivery")
	require.NoError(t, tx.Rollback())

	e.localDeliverer().runOnce(t)
	require.Empty(t, rc.Got())
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_deliveries`))
}

// A process that claims a delivery and dies leaves it leased; when the lease runs out any
// deliverer takes it, and the log shows the lost attempt for what it is. A late failure of
// the lost attempt cannot undo the delivery.
func TestWebhookClaimOfADeadProcessIsRetriedAfterItsLease(t *testing.T) {
	t.Parallel()
	e, rc, w := newHookedEnv(t, nil)
	id := e.insertEvent("backfill.created", 1, "d")

	lost, err := e.Store.WebhookDeliveryClaim(context.Background(),
		repo.WebhookClaimParams{PerEndpoint: 4, Limit: 10, Lease: 15 * time.Second, FanOut: true})
	require.NoError(t, err)
	require.Len(t, lost, 1)
	d := e.localDeliverer()
	d.runOnce(t)
	require.Empty(t, rc.Got(), "a leased delivery is not claimed again")

	e.Clock.Advance(15 * time.Second)
	d.runOnce(t)
	require.Len(t, rc.Got(), 1)
	log := e.webhookLog(w.Id)
	require.Len(t, log, 2)
	require.Nil(t, log[0].StatusCode)
	require.Equal(t, "timeout", string(*log[0].Error), "an attempt that never recorded its outcome is a timeout")
	require.EqualValues(t, 2, log[1].Attempt)
	require.NotNil(t, log[1].DeliveredAt)

	msg := domain.DeliveryErrorHTTPStatus
	retry := 5 * time.Second
	changed, err := e.Store.WebhookDeliveryRecord(context.Background(), repoOutcome(w.Id, id, 1, 500, msg, &retry))
	require.NoError(t, err)
	require.False(t, changed, "the lost attempt's late failure changes nothing")
	var state string
	require.NoError(t, e.DB.Get(&state, `SELECT state FROM webhook_deliveries`))
	require.Equal(t, "delivered", state)
	log = e.webhookLog(w.Id)
	require.EqualValues(t, 500, *log[0].StatusCode, "the log keeps what the lost attempt got")
	require.Nil(t, log[0].NextAttemptAt)
}

// Several deliverers polling at once (as replicas do) deliver every event exactly once
// when every receiver answers in time: the claim skips rows another one holds.
func TestWebhookDeliverersRunningTogetherDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	e, rc, w := newHookedEnv(t, nil)
	const events = 60
	want := map[string]bool{}
	for i := range events {
		want[strconv.FormatInt(e.insertEvent("backfill.updated", int64(i+1), "d"), 10)] = true
	}
	const replicas = 4
	ds := make([]*deliverer, replicas)
	for i := range ds {
		ds[i] = e.newDeliverer(webhooks.Config{AllowLocal: true, Concurrency: 3})
	}
	ready := make(chan struct{})
	errs := make(chan error, replicas)
	for _, d := range ds {
		go func() {
			<-ready
			for range events {
				if err := d.RunOnce(context.Background()); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	close(ready)
	for range replicas {
		require.NoError(t, <-errs)
	}

	seen := map[string]int{}
	for _, g := range rc.Got() {
		require.NoError(t, client.VerifyWebhook(w.Secret, g.Header, g.Body))
		seen[g.Header.Get("webhook-id")]++
	}
	require.Len(t, seen, events)
	for id, n := range seen {
		require.True(t, want[id], "unknown event %s", id)
		require.Equal(t, 1, n, "event %s delivered %d times", id, n)
	}
	var undelivered, extraAttempts int
	require.NoError(t, e.DB.Get(&undelivered, `SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'`))
	require.NoError(t, e.DB.Get(&extraAttempts, `SELECT count(*) FROM webhook_deliveries WHERE attempts <> 1`))
	require.Zero(t, undelivered)
	require.Zero(t, extraAttempts)
}

func repoOutcome(webhookID, eventID int64, attempt, status int, msg domain.DeliveryError, retry *time.Duration) (o repo.WebhookOutcome) {
	o.WebhookID, o.EventID, o.Attempt = webhookID, eventID, attempt
	o.StatusCode, o.Error, o.RetryAfter = &status, &msg, retry
	return o
}

// The background loop, as each replica runs it: it delivers without RunOnce being called,
// and Stop is safe before Start, idempotent, and returns after the loop has ended.
func TestWebhookDelivererLoopDeliversUntilStopped(t *testing.T) {
	t.Parallel()
	e, rc, _ := newHookedEnv(t, nil)
	idle := e.newDeliverer(webhooks.Config{AllowLocal: true})
	idle.Stop()

	recorded := make(outcomes, 10)
	d := e.newDeliverer(webhooks.Config{AllowLocal: true, Interval: 10 * time.Millisecond, Observer: recorded})
	d.Start(context.Background())
	d.Start(context.Background())
	for i := range 3 {
		id := e.insertEvent("backfill.created", 1, "d")
		select {
		case outcome := <-recorded:
			require.Equal(t, string(domain.DeliveryDelivered), outcome)
		case <-time.After(30 * time.Second):
			t.Fatalf("event %d not delivered by the loop within 30 s", id)
		}
		require.Len(t, rc.Got(), i+1)
		require.Equal(t, strconv.FormatInt(id, 10), rc.Got()[i].Header.Get("webhook-id"))
	}
	d.Stop()
	d.Stop()
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'`))
}

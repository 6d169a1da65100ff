package tests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

var allWebhookEventTypes = []api.WebhookEventType{
	"backfill.created", "backfill.updated", "backfill.paused", "backfill.unpaused",
	"backfill.canceling", "backfill.succeeded", "backfill.failed", "backfill.canceled",
	"backfill_group.created", "backfill_group.paused", "backfill_group.unpaused", "backfill_group.canceling",
	"backfill_group.succeeded", "backfill_group.failed", "backfill_group.canceled",
}

func TestWebhookCreateAnswersTheSecretOnceAndReadsNeverShowIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	desc := "ops channel"
	res := e.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://hooks.example.com/b", "description": desc})
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var w api.WebhookWithSecret
	res.Decode(t, &w)
	require.Equal(t, fmt.Sprintf("/api/v1/webhooks/%d", w.Id), res.Header.Get("Location"))
	require.Equal(t, "https://hooks.example.com/b", w.Url)
	require.Equal(t, allWebhookEventTypes, w.EventTypes, "event_types defaults to every type")
	require.Equal(t, desc, *w.Description)
	require.True(t, w.CreatedAt.Equal(e.Clock.Now()), "created_at %s is the database clock %s", w.CreatedAt, e.Clock.Now())
	require.True(t, strings.HasPrefix(w.Secret, "whsec_"), w.Secret)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(w.Secret, "whsec_"))
	require.NoError(t, err)
	require.Len(t, key, 32)

	other := e.createWebhook("http://hooks.example.com/2")
	require.NotEqual(t, w.Secret, other.Secret, "every webhook has its own secret")

	for _, path := range []string{fmt.Sprintf("/api/v1/webhooks/%d", w.Id), "/api/v1/webhooks"} {
		res := e.Do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, res.Status)
		require.NotContains(t, string(res.Body), "secret")
		require.NotContains(t, string(res.Body), strings.TrimPrefix(w.Secret, "whsec_"))
	}
	var got api.Webhook
	e.Do(http.MethodGet, fmt.Sprintf("/api/v1/webhooks/%d", w.Id), nil).Decode(t, &got)
	require.Equal(t, api.Webhook{Id: w.Id, Url: w.Url, EventTypes: w.EventTypes, Description: w.Description, CreatedAt: w.CreatedAt}, got)

	var list api.WebhookCollection
	e.Do(http.MethodGet, "/api/v1/webhooks?limit=1&offset=1", nil).Decode(t, &list)
	require.EqualValues(t, 2, list.TotalEntries)
	require.Len(t, list.Webhooks, 1)
	require.Equal(t, other.Id, list.Webhooks[0].Id)
}

func TestWebhookEventTypesAreKeptOnceEachInTheOrderGiven(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/h", "backfill.failed", "backfill.succeeded", "backfill.failed")
	require.Equal(t, []api.WebhookEventType{"backfill.failed", "backfill.succeeded"}, w.EventTypes)
}

func TestWebhookCreateRejectsURLsThatAreNotAbsoluteHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, url := range []string{
		"ftp://example.com/hook", "example.com/hook", "/hook", "http://", "https:///path",
		"mailto:ops@example.com", "https://user:pw@example.com/hook", "http://exa mple.com/", "javascript:alert(1)",
	} {
		res := e.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": url})
		requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_webhook", "url ", url)
	}
	require.Zero(t, e.Count(`SELECT count(*) FROM webhooks`), "nothing is registered by a refused request")
}

func TestWebhookCreateRejectsMalformedBodiesWith400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, body := range map[string]string{
		"unknown event type":     `{"url": "https://example.com/h", "event_types": ["backfill.exploded"]}`,
		"empty event types":      `{"url": "https://example.com/h", "event_types": []}`,
		"event types not a list": `{"url": "https://example.com/h", "event_types": "backfill.created"}`,
		"unknown field":          `{"url": "https://example.com/h", "secret": "whsec_mine"}`,
		"no url":                 `{"event_types": ["backfill.created"]}`,
		"empty url":              `{"url": ""}`,
		"url not a string":       `{"url": 7}`,
		"not an object":          `["https://example.com/h"]`,
		"url too long":           fmt.Sprintf(`{"url": "https://example.com/%s"}`, strings.Repeat("a", 2048)),
	} {
		res := e.Do(http.MethodPost, "/api/v1/webhooks", body)
		requireProblem(t, res, http.StatusBadRequest, "invalid_request", name)
	}
}

func TestWebhookDeleteAnswers204ThenTheWebhookIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/h")
	e.insertEvent("backfill.created", 1, "d")
	require.NoError(t, e.Store.WebhookFanOut(context.Background()))
	path := fmt.Sprintf("/api/v1/webhooks/%d", w.Id)
	res := e.Do(http.MethodDelete, path, nil)
	require.Equal(t, http.StatusNoContent, res.Status, "body: %s", res.Body)
	require.Empty(t, res.Body)
	for _, req := range [][2]string{{http.MethodGet, path}, {http.MethodDelete, path}, {http.MethodGet, path + "/deliveries"}} {
		res := e.Do(req[0], req[1], nil)
		requireProblem(t, res, http.StatusNotFound, "webhook_not_found", req[0], " ", req[1])
	}
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhook_deliveries`), "the delete only marks the webhook")
	e.localDeliverer().runOnce(t)
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_attempts`), "a deleted webhook's delivery is not attempted")
	n, err := e.localDeliverer().PurgeOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_deliveries`), "the background purge removed its pending delivery")
}

func TestWebhookRoutesRejectBadIdsAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/h")
	for _, path := range []string{
		"/api/v1/webhooks/0", "/api/v1/webhooks/abc", "/api/v1/webhooks?limit=0",
		"/api/v1/webhooks?limit=1001", "/api/v1/webhooks?offset=-1",
		fmt.Sprintf("/api/v1/webhooks/%d/deliveries?event_id=0", w.Id),
		fmt.Sprintf("/api/v1/webhooks/%d/deliveries?limit=x", w.Id),
	} {
		res := e.Do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", path, res.Body)
	}
	res := e.Do(http.MethodGet, "/api/v1/webhooks/999999", nil)
	require.Equal(t, http.StatusNotFound, res.Status)
}

func TestWebhookDeliveriesOfANewWebhookAreEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("https://example.com/h")
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/webhooks/%d/deliveries", w.Id), nil)
	require.Equal(t, http.StatusOK, res.Status)
	var raw map[string]json.RawMessage
	res.Decode(t, &raw)
	require.JSONEq(t, `[]`, string(raw["deliveries"]))
	require.JSONEq(t, `0`, string(raw["total_entries"]))
}

// URL schemes and hosts are case-insensitive: an upper-case one is accepted and kept in lower
// case (the rest of the URL as sent); a port outside 1..65535 is refused.
func TestWebhookURLSchemeAndHostAreCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.createWebhook("HTTP://Example.COM/Hook?Q=A")
	require.Equal(t, "http://example.com/Hook?Q=A", w.Url)
	w = e.createWebhook("HtTpS://HOOKS.example.com:8443/x")
	require.Equal(t, "https://hooks.example.com:8443/x", w.Url)
	for _, url := range []string{"https://example.com:99999/h", "http://example.com:0/", "http://example.com:65536"} {
		res := e.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": url})
		requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_webhook", "url ", url)
	}
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM webhooks`))
}

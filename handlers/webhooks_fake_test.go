package handlers_test

import (
	"context"
	"strings"

	"github.com/backfillsvc/backfill/repo"
)

// The fake store's webhook methods: they check what reaches the repository like the others.

var webhookEventTypes = []string{"backfill.created", "backfill.updated", "backfill.paused", "backfill.unpaused",
	"backfill.canceling", "backfill.succeeded", "backfill.failed", "backfill.canceled",
	"backfill_group.created", "backfill_group.paused", "backfill_group.unpaused", "backfill_group.canceling",
	"backfill_group.succeeded", "backfill_group.failed", "backfill_group.canceled"}

func fakeWebhook(id int64) repo.Webhook {
	return repo.Webhook{ID: id, URL: "https://example.com/hook", EventTypes: webhookEventTypes, CreatedAt: fakeTime}
}

func (f *fakeStore) WebhookCreate(ctx context.Context, p repo.WebhookCreateParams) (repo.Webhook, bool, error) {
	problems := []string{checkLen("url", p.URL, 1, 2048)}
	if !strings.HasPrefix(p.URL, "http://") && !strings.HasPrefix(p.URL, "https://") {
		problems = append(problems, "url "+p.URL+" is not http(s)")
	}
	if len(p.EventTypes) == 0 {
		problems = append(problems, "no event types")
	}
	for _, t := range p.EventTypes {
		problems = append(problems, checkEnum("event_type", t, webhookEventTypes...))
	}
	if !strings.HasPrefix(p.Secret, "whsec_") {
		problems = append(problems, "secret without whsec_")
	}
	problems = append(problems, checkKey(p.IdempotencyKey))
	err := f.call("WebhookCreate", true, problems...)
	w := fakeWebhook(1)
	w.Secret = p.Secret
	return w, false, err
}

func (f *fakeStore) WebhookGet(ctx context.Context, id int64) (repo.Webhook, error) {
	err := f.call("WebhookGet", false, checkPos("webhook_id", id))
	return fakeWebhook(id), err
}

func (f *fakeStore) WebhookList(ctx context.Context, p repo.ListParams) ([]repo.Webhook, int, error) {
	err := f.call("WebhookList", false, checkList(p)...)
	return []repo.Webhook{fakeWebhook(1)}, 1, err
}

func (f *fakeStore) WebhookDelete(ctx context.Context, id int64) error {
	return f.call("WebhookDelete", true, checkPos("webhook_id", id))
}

func (f *fakeStore) WebhookAttemptList(ctx context.Context, p repo.WebhookAttemptListParams) ([]repo.WebhookAttempt, int, error) {
	problems := append(checkList(repo.ListParams{Limit: p.Limit, Offset: p.Offset}), checkPos("webhook_id", p.WebhookID))
	if p.EventID != nil {
		problems = append(problems, checkPos("event_id", *p.EventID))
	}
	err := f.call("WebhookAttemptList", false, problems...)
	code := 200
	return []repo.WebhookAttempt{{EventID: 1, Attempt: 1, StatusCode: &code, AttemptedAt: fakeTime, DeliveredAt: &fakeTime}}, 1, err
}

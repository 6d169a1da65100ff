package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// CreateWebhook registers an endpoint for events. The answer's Secret (whsec_...) is shown
// only here: keep it for NewWebhookVerifier on the receiving side. A URL that is not an
// absolute http(s) URL is a *ProblemError with code invalid_webhook. It sends
// opts.IdempotencyKey (a random one when empty) and is retried with it as Client.Retry says:
// a registration that was applied but whose answer was lost is answered again with the same
// webhook and secret, so no second webhook is made.
func (c *Client) CreateWebhook(ctx context.Context, req WebhookCreate, opts KeyOptions) (WebhookWithSecret, error) {
	key := keyOr(opts.IdempotencyKey)
	params := CreateWebhookParams{IdempotencyKey: &key}
	return withRetry(ctx, c, func() (WebhookWithSecret, error) {
		resp, err := c.raw().CreateWebhook(ctx, &params, req)
		w, _, err := decode[WebhookWithSecret](resp, err, http.StatusCreated)
		return w, err
	})
}

// GetWebhook reads a webhook, without its secret (404 webhook_not_found).
func (c *Client) GetWebhook(ctx context.Context, id int64) (Webhook, error) {
	resp, err := c.raw().GetWebhook(ctx, id)
	w, _, err := decode[Webhook](resp, err, http.StatusOK)
	return w, err
}

// ListWebhooks reads a page of webhooks by id; params may be nil.
func (c *Client) ListWebhooks(ctx context.Context, params *ListWebhooksParams) (WebhookCollection, error) {
	resp, err := c.raw().ListWebhooks(ctx, params)
	l, _, err := decode[WebhookCollection](resp, err, http.StatusOK)
	return l, err
}

// DeleteWebhook removes a webhook with its pending deliveries and log (404
// webhook_not_found).
func (c *Client) DeleteWebhook(ctx context.Context, id int64) error {
	resp, err := c.raw().DeleteWebhook(ctx, id)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return fmt.Errorf("client: reading the answer to DELETE %s: %w", resp.Request.URL.Path, err)
	}
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return problemFrom(resp, body)
}

// ListWebhookDeliveries reads a page of a webhook's delivery log, every attempt in the order
// made; params may be nil (EventId narrows it to one event).
func (c *Client) ListWebhookDeliveries(ctx context.Context, id int64, params *ListWebhookDeliveriesParams) (WebhookDeliveryCollection, error) {
	resp, err := c.raw().ListWebhookDeliveries(ctx, id, params)
	l, _, err := decode[WebhookDeliveryCollection](resp, err, http.StatusOK)
	return l, err
}

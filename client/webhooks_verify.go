package client

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Errors of webhook verification; match them with errors.Is.
var (
	// ErrWebhookSignature: the headers are missing or malformed, or no signature matches.
	ErrWebhookSignature = errors.New("webhook signature does not verify")
	// ErrWebhookTimestamp: webhook-timestamp is more than 5 minutes from the receiver's
	// clock (a replayed or badly delayed request).
	ErrWebhookTimestamp = errors.New("webhook timestamp outside the tolerance")
)

// maxWebhookBody bounds what VerifyRequest reads; an event is a few kilobytes.
const maxWebhookBody = 1 << 20

// WebhookVerifier checks the Standard Webhooks signature of deliveries to a receiver, with
// the secret POST /webhooks answered (whsec_...). It uses the Standard Webhooks project's
// own Go library. Receivers should also de-duplicate by the webhook-id header (the event
// id): delivery is at least once.
//
//	v, err := client.NewWebhookVerifier(os.Getenv("BACKFILL_WEBHOOK_SECRET"))
//	http.HandleFunc("/hooks", func(w http.ResponseWriter, r *http.Request) {
//		body, err := v.VerifyRequest(r)
//		if err != nil {
//			http.Error(w, "bad signature", http.StatusBadRequest)
//			return
//		}
//		// decode body (an event: id, type, backfill_id, dag_id, occurred_at, data), answer 2xx
//	})
type WebhookVerifier struct {
	wh *standardwebhooks.Webhook
}

// NewWebhookVerifier returns a verifier for one webhook's secret.
func NewWebhookVerifier(secret string) (*WebhookVerifier, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("client: webhook secret: %w", err)
	}
	return &WebhookVerifier{wh: wh}, nil
}

// Verify checks the webhook-id, webhook-timestamp and webhook-signature headers against the
// raw body, exactly as received (not re-encoded), and that the timestamp is within 5
// minutes of now.
func (v *WebhookVerifier) Verify(header http.Header, body []byte) error {
	err := v.wh.Verify(body, header)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, standardwebhooks.ErrMessageTooOld), errors.Is(err, standardwebhooks.ErrMessageTooNew):
		return fmt.Errorf("%w: %w", ErrWebhookTimestamp, err)
	default:
		return fmt.Errorf("%w: %w", ErrWebhookSignature, err)
	}
}

// VerifyRequest reads a delivery's body (up to 1 MiB) and verifies it; it answers the body.
func (v *WebhookVerifier) VerifyRequest(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody))
	if err != nil {
		return nil, fmt.Errorf("client: reading the webhook body: %w", err)
	}
	return body, v.Verify(r.Header, body)
}

// VerifyWebhook is NewWebhookVerifier(secret).Verify(header, body).
func VerifyWebhook(secret string, header http.Header, body []byte) error {
	v, err := NewWebhookVerifier(secret)
	if err != nil {
		return err
	}
	return v.Verify(header, body)
}

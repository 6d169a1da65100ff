package webhooks

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/backfillsvc/backfill/repo"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// event is an event as the service serves it: { id, type, backfill_id, dag_id, occurred_at,
// data }. data is the stored jsonb, passed through untouched so that numbers keep their digits.
type event struct {
	ID         int64           `json:"id"`
	Type       string          `json:"type"`
	BackfillID int64           `json:"backfill_id"`
	DagID      string          `json:"dag_id"`
	OccurredAt time.Time       `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// EventJSON is the body of a delivery: the same JSON GET /events answers for the event.
func EventJSON(e repo.WebhookEvent) ([]byte, error) {
	data := json.RawMessage(e.Data)
	if len(data) == 0 {
		data = json.RawMessage(`{}`)
	}
	body, err := json.Marshal(event{
		ID:         e.ID,
		Type:       e.Type,
		BackfillID: e.BackfillID,
		DagID:      e.DagID,
		OccurredAt: e.OccurredAt.UTC(),
		Data:       data,
	})
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", e.ID, err)
	}
	return body, nil
}

// signedHeaders are the Standard Webhooks headers of one attempt: webhook-id (the event id),
// webhook-timestamp and webhook-signature, signed with the project's own Go library.
func signedHeaders(secret, msgID string, ts time.Time, body []byte) (http.Header, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	sig, err := wh.Sign(msgID, ts, body)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, msgID)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, nil
}

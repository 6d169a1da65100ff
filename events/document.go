package events

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// Document is an event as the service sends it, everywhere: GET /events, the event
// streams and webhook deliveries ({ id, type, backfill_id, dag_id, occurred_at, data }, the
// spec's Event). data is the stored jsonb passed through untouched, so that numbers in a
// backfill's conf keep their digits (the spec's generated type would decode and re-encode
// them). The Go SDK decodes the same document into the spec's generated client.Event.
type Document struct {
	ID         int64            `json:"id"`
	Type       domain.EventType `json:"type"`
	BackfillID int64            `json:"backfill_id"`
	DagID      string           `json:"dag_id"`
	OccurredAt time.Time        `json:"occurred_at"`
	Data       json.RawMessage  `json:"data"`
}

// NewDocument is the document of one stored event.
func NewDocument(e repo.Event) Document {
	data := json.RawMessage(e.Data)
	if len(data) == 0 {
		data = json.RawMessage(`{}`)
	}
	return Document{
		ID: e.ID, Type: e.Type, BackfillID: e.BackfillID, DagID: e.DagID,
		OccurredAt: e.OccurredAt.UTC(), Data: data,
	}
}

// JSON is the document's encoding: the body of a webhook delivery, the data of a stream
// message.
func (d Document) JSON() ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", d.ID, err)
	}
	return b, nil
}

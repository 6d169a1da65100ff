package domain

import (
	"encoding/json"
	"testing"
	"time"
)

// An event's document keeps data's numbers as stored and answers occurred_at in UTC.
func TestEventDocumentKeepsDataExactlyAndAnswersUTC(t *testing.T) {
	at := time.Date(2024, 3, 1, 12, 0, 0, 500000000, time.FixedZone("x", 3600))
	body, err := json.Marshal(Event{ID: 7, Type: EventBackfillCreated, BackfillID: 3, DagID: "d",
		OccurredAt: at, Data: json.RawMessage(`{"backfill": {"n": 9007199254740993, "f": 1e400}}`)})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["occurred_at"]) != `"2024-03-01T11:00:00.5Z"` {
		t.Errorf("occurred_at %s", got["occurred_at"])
	}
	if string(got["data"]) != `{"backfill":{"n":9007199254740993,"f":1e400}}` {
		t.Errorf("data %s", got["data"])
	}
	if string(got["type"]) != `"backfill.created"` || string(got["id"]) != "7" {
		t.Errorf("document %s", body)
	}
}

package domain

import (
	"encoding/json"
	"time"
)

// EventType names a change of a backfill, as events carry it in "type" and webhooks filter
// on it. The events table's events_type_valid constraint lists the same values.
type EventType string

// The event types.
const (
	EventBackfillCreated   EventType = "backfill.created"
	EventBackfillUpdated   EventType = "backfill.updated"
	EventBackfillPaused    EventType = "backfill.paused"
	EventBackfillUnpaused  EventType = "backfill.unpaused"
	EventBackfillCanceling EventType = "backfill.canceling"
	EventBackfillSucceeded EventType = "backfill.succeeded"
	EventBackfillFailed    EventType = "backfill.failed"
	EventBackfillCanceled  EventType = "backfill.canceled"

	EventGroupCreated   EventType = "backfill_group.created"
	EventGroupPaused    EventType = "backfill_group.paused"
	EventGroupUnpaused  EventType = "backfill_group.unpaused"
	EventGroupCanceling EventType = "backfill_group.canceling"
	EventGroupSucceeded EventType = "backfill_group.succeeded"
	EventGroupFailed    EventType = "backfill_group.failed"
	EventGroupCanceled  EventType = "backfill_group.canceled"
)

// EventTypes are all event types, in the order the API lists them.
var EventTypes = []EventType{
	EventBackfillCreated, EventBackfillUpdated, EventBackfillPaused, EventBackfillUnpaused,
	EventBackfillCanceling, EventBackfillSucceeded, EventBackfillFailed, EventBackfillCanceled,
	EventGroupCreated, EventGroupPaused, EventGroupUnpaused, EventGroupCanceling,
	EventGroupSucceeded, EventGroupFailed, EventGroupCanceled,
}

// Terminal reports whether an event ends its backfill's story (a group's events end no
// backfill's).
func (t EventType) Terminal() bool {
	return t == EventBackfillSucceeded || t == EventBackfillFailed || t == EventBackfillCanceled
}

// DeliveryError is the kind of failure of a webhook delivery attempt, as the delivery log
// shows it. It never carries an address, a resolver or other network detail.
type DeliveryError string

// The kinds of delivery failure.
const (
	// DeliveryErrorTimeout: no answer in time (including an attempt whose process stopped
	// before an answer was recorded).
	DeliveryErrorTimeout DeliveryError = "timeout"
	// DeliveryErrorConnectionRefused: the connection was refused, reset or closed before an
	// answer came.
	DeliveryErrorConnectionRefused DeliveryError = "connection_refused"
	// DeliveryErrorDNS: the host name could not be resolved.
	DeliveryErrorDNS DeliveryError = "dns"
	// DeliveryErrorTLS: the TLS handshake or the certificate failed.
	DeliveryErrorTLS DeliveryError = "tls"
	// DeliveryErrorRefusedAddress: the target resolved to a loopback, link-local or
	// unspecified address, which webhooks may not reach.
	DeliveryErrorRefusedAddress DeliveryError = "refused_address"
	// DeliveryErrorHTTPStatus: the receiver answered with a status other than 2xx
	// (status_code says which; redirects are not followed).
	DeliveryErrorHTTPStatus DeliveryError = "http_status"
)

// DeliveryOutcome is what became of one webhook delivery attempt, as the metrics, the trace
// and the log label it.
type DeliveryOutcome string

// The outcomes of an attempt.
const (
	// DeliveryDelivered: the receiver answered 2xx.
	DeliveryDelivered DeliveryOutcome = "delivered"
	// DeliveryRetry: the attempt failed and the delivery is due again later.
	DeliveryRetry DeliveryOutcome = "retry"
	// DeliveryGaveUp: the attempt failed and was the last one.
	DeliveryGaveUp DeliveryOutcome = "gave_up"
)

// Event is one row of the outbox and the one document the service sends for it, everywhere:
// GET /events, the event streams and webhook deliveries ({ id, type, backfill_id, dag_id,
// occurred_at, data }, the spec's Event). Events are written only by the triggers of
// migrations/00007_events_writer.sql, in the transaction of the change they report. Data is
// stored in its API form ({"backfill": <as GET answers it>, ...}) and passed through
// untouched, so that numbers in a backfill's conf keep their digits (the spec's generated type
// would decode and re-encode them). The Go SDK decodes the same document into the spec's
// generated client.Event.
type Event struct {
	ID         int64     `db:"id" json:"id"`
	Type       EventType `db:"type" json:"type"`
	BackfillID int64     `db:"backfill_id" json:"backfill_id,omitempty"`
	DagID      string    `db:"dag_id" json:"dag_id,omitempty"`
	// GroupID is the group of a group's event, or of the backfill a member's event is of;
	// nil for none. A group's event has no BackfillID (0) or DagID ("").
	GroupID    *int64          `db:"group_id" json:"group_id,omitempty"`
	OccurredAt time.Time       `db:"occurred_at" json:"occurred_at"`
	Data       json.RawMessage `db:"data" json:"data"`
}

// MarshalJSON answers occurred_at in UTC, whatever zone the row was read in, and an empty
// object for data that was never set.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event // the same fields without this method
	p := plain(e)
	p.OccurredAt = p.OccurredAt.UTC()
	if len(p.Data) == 0 {
		p.Data = json.RawMessage(`{}`)
	}
	return json.Marshal(p)
}

package domain

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
)

// EventTypes are all event types, in the order the API lists them.
var EventTypes = []EventType{
	EventBackfillCreated, EventBackfillUpdated, EventBackfillPaused, EventBackfillUnpaused,
	EventBackfillCanceling, EventBackfillSucceeded, EventBackfillFailed, EventBackfillCanceled,
}

// Terminal reports whether an event ends its backfill's story.
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

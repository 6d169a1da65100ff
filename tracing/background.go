package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// WebhookAttempt starts the span of one delivery attempt and returns the function that
// ends it.
func (t *Tracer) WebhookAttempt(ctx context.Context, webhookID, eventID int64, attempt int) (context.Context, func(error)) {
	ctx, span := t.Start(ctx, "webhook attempt",
		attribute.Int64("webhook.id", webhookID), attribute.Int64("event.id", eventID), attribute.Int("webhook.attempt", attempt))
	return ctx, func(err error) { t.End(span, err) }
}

// SetAttributes adds attributes to ctx's span; without one (tracing off) it does nothing.
func SetAttributes(ctx context.Context, attrs ...attribute.KeyValue) {
	trace.SpanFromContext(ctx).SetAttributes(attrs...)
}

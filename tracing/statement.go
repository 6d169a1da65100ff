package tracing

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// started is whether any Tracer was ever made in this process: without one no span can be
// recording, and the database layer's hooks return before looking into a context.
var started atomic.Bool

// statementAttrs are the attributes every statement span carries (OTel's database
// conventions); the statement's text is left out: names and attributes say what it did.
var statementAttrs = []attribute.KeyValue{attribute.String("db.system.name", "postgresql")}

// Statement starts a span for one SQL statement, named by its operation (its first keyword:
// SELECT, INSERT, COMMIT), never by its text. Its parent is tx, the span of the transaction
// the statement runs in, when that is recording, else ctx's span. It returns nil when
// neither is recording (tracing off, or a trace not sampled), so that a statement then pays
// one look into its context and nothing else. The span is started through its parent's
// provider, so the database layer needs no *Tracer of its own.
func Statement(ctx context.Context, tx trace.Span, query string) trace.Span {
	if !started.Load() {
		return nil
	}
	return StatementOp(ctx, tx, SQLOperation(query))
}

// StatementOp is Statement for a statement whose operation is known (a prepared one's, read
// once at its preparation); an empty op is a statement not traced.
func StatementOp(ctx context.Context, tx trace.Span, op string) trace.Span {
	if op == "" || !started.Load() {
		return nil
	}
	parent := tx
	if parent == nil || !parent.IsRecording() {
		parent = trace.SpanFromContext(ctx)
		if !parent.IsRecording() {
			return nil
		}
	}
	_, span := parent.TracerProvider().Tracer(instrumentationName).Start(
		trace.ContextWithSpan(ctx, parent), op,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(statementAttrs...),
		trace.WithAttributes(attribute.String("db.operation.name", op)))
	return span
}

// Recording is ctx's span when it is recording (the span of a transaction being begun),
// else nil: what a session keeps to parent the transaction's statements.
func Recording(ctx context.Context) trace.Span {
	if !started.Load() {
		return nil
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		return span
	}
	return nil
}

// EndStatement ends a span Statement started (nil: none), marking it failed on err.
func EndStatement(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// SQLOperation is the first keyword of query, upper-cased, after blanks and comments; "SQL"
// when there is none.
func SQLOperation(query string) string {
	i := 0
	for i < len(query) {
		switch c := query[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(':
			i++
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			for i < len(query) && query[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			end := i + 2
			for end+1 < len(query) && (query[end] != '*' || query[end+1] != '/') {
				end++
			}
			i = end + 2
		default:
			j := i
			for j < len(query) && isLetter(query[j]) {
				j++
			}
			if j == i {
				return "SQL"
			}
			return upper(query[i:j])
		}
	}
	return "SQL"
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// upper upper-cases an ASCII word, without allocating when it already is.
func upper(w string) string {
	for k := 0; k < len(w); k++ {
		if w[k] >= 'a' && w[k] <= 'z' {
			b := []byte(w)
			for m := range b {
				if b[m] >= 'a' && b[m] <= 'z' {
					b[m] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return w
}

package tracing

import (
	"context"
	"runtime"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Operation names a span after the exported method of pkg's *Store that called into the
// code asking (for example "repo.RunClaim"), found on the stack: the transaction runner is
// shared by every method, and naming spans this way needs no change at each caller. Only
// called with tracing on; a walk of the stack costs about a microsecond.
func Operation(pkgPath, pkgName string) string {
	var pcs [24]uintptr
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	prefix := pkgPath + ".(*Store)."
	for {
		f, more := frames.Next()
		if method, ok := strings.CutPrefix(f.Function, prefix); ok && method != "" && isExported(method) {
			method, _, _ = strings.Cut(method, ".") // a closure's frame: RunClaim.func1
			return pkgName + "." + method
		}
		if !more {
			return pkgName + ".transaction"
		}
	}
}

func isExported(name string) bool { return name[0] >= 'A' && name[0] <= 'Z' }

// StartOperation starts a span named by Operation(pkgPath, pkgName) and returns the function
// that ends it with the operation's error.
//
// Under a span that was not sampled it starts none: every sampler this service takes decides
// a child as its parent was decided (the parent-based ones by the parent, the ratio one by
// the trace id they share), so the span would not be recorded, and a request that is not
// traced saves the walk of the stack and the span.
func (t *Tracer) StartOperation(ctx context.Context, pkgPath, pkgName string) (context.Context, func(error)) {
	if t == nil || unsampledParent(ctx) {
		return ctx, func(error) {}
	}
	ctx, span := t.Start(ctx, Operation(pkgPath, pkgName))
	return ctx, func(err error) { t.End(span, err) }
}

// unsampledParent reports whether ctx holds a span whose trace was decided not to be sampled.
func unsampledParent(ctx context.Context) bool {
	sc := trace.SpanContextFromContext(ctx)
	return sc.IsValid() && !sc.IsSampled()
}

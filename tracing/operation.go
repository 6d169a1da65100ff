package tracing

import (
	"context"
	"runtime"
	"strings"
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
func (t *Tracer) StartOperation(ctx context.Context, pkgPath, pkgName string) (context.Context, func(error)) {
	ctx, span := t.Start(ctx, Operation(pkgPath, pkgName))
	return ctx, func(err error) { t.End(span, err) }
}

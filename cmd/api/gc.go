package main

import (
	"runtime/debug"
)

// The service's garbage collector settings when the operator sets neither GOGC nor GOMEMLIMIT
// (the Go runtime's own variables, which always win).
//
// The service's live heap is a few MiB at rest (3.6 MiB serving status reads), so with Go's
// default GOGC of 100 it collected every 4 MiB of garbage, about every 500 status reads, and
// the collector took about 4 µs of each read's ~110 µs (perf). GOGC 400 collects a
// fifth as often. The soft limit keeps what that costs in memory bounded: as the heap nears
// it the runtime collects more often, so a big creation (a 100,000-slot backfill holds tens of
// MiB) does not grow the heap to five times its live size.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 128 << 20
)

// tuneGC applies the defaults above unless the environment set either variable: an operator
// who tunes one has a reason, and the pair only makes sense together.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(defaultGCPercent)
	debug.SetMemoryLimit(defaultMemoryLimit)
}

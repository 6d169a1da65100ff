package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// The service's collector defaults apply only when the operator set neither of Go's own
// variables; one set leaves both to the runtime.
func TestTuneGCAppliesItsDefaultsOnlyWhenTheOperatorSetNone(t *testing.T) {
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1) // a negative limit reads it
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
	for _, set := range []string{"GOGC", "GOMEMLIMIT"} {
		tuneGC(func(k string) string {
			if k == set {
				return "150"
			}
			return ""
		})
		require.Equal(t, 100, debug.SetGCPercent(100), "%s set: GOGC left alone", set)
		require.Equal(t, limit, debug.SetMemoryLimit(-1), "%s set: GOMEMLIMIT left alone", set)
	}
	tuneGC(func(string) string { return "" })
	require.Equal(t, defaultGCPercent, debug.SetGCPercent(100))
	require.Equal(t, int64(defaultMemoryLimit), debug.SetMemoryLimit(-1))
}

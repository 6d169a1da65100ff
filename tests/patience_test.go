package tests

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// patient scales a wall-clock bound that is not what a test proves (how long a harness waits
// for a browser, a LOCK_WAIT or a write timeout chosen only to keep a test short) by the
// machine's load: the 1-minute load average per CPU, at least 1 and at most maxLoadFactor.
// TEST_LOAD_FACTOR overrides the measured factor (a CI runner that knows its neighbours).
// Bounds that ARE the claim are never scaled: they run behind requireTimingRun.
func patient(d time.Duration) time.Duration {
	return time.Duration(float64(d) * loadFactor())
}

// maxLoadFactor caps the scaling: a machine loaded past it is not one a bound can be kept on,
// and the test binary's -timeout stays the outer limit.
const maxLoadFactor = 10

// loadFactor answers TEST_LOAD_FACTOR when set to a number ≥ 1, else the run-queue length per
// CPU read from /proc/loadavg now (1 where there is none), clamped to [1, maxLoadFactor].
func loadFactor() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("TEST_LOAD_FACTOR"), 64); err == nil && v >= 1 {
		return v
	}
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 1
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 1
	}
	return min(max(load/float64(runtime.NumCPU()), 1), maxLoadFactor)
}

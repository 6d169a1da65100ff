// Package loadkit holds what the load tests of tests and tests/faults share: load goroutines
// with random sources that a seed replays, a collector of the failures they see (which must
// not fail the test themselves), decoding of the answers they get, and a loop that runs on a
// ticker until it is stopped.
package loadkit

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Looper answers a goLoad function for a load test: goLoad(stream, fn) starts a goroutine,
// counted in wg, that calls fn again and again until stop is set, with a random source of
// its own seeded by (seed, stream), so that a seed replays the load's choices.
func Looper(wg *sync.WaitGroup, stop *atomic.Bool, seed uint64) (goLoad func(stream uint64, fn func(*rand.Rand))) {
	return func(stream uint64, fn func(*rand.Rand)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, stream))
			for !stop.Load() {
				fn(rng)
			}
		}()
	}
}

// keep is how many failure messages a Failures keeps; it counts them all.
const keep = 40

// Failures collects failures seen on load goroutines; the test fails on them at the end.
// The zero value is ready to use.
type Failures struct {
	mu   sync.Mutex
	n    int
	msgs []string
}

// Add records one failure.
func (f *Failures) Add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.msgs) < keep {
		f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
	}
}

// Summary answers how many failures were recorded and the messages kept, one a line.
func (f *Failures) Summary() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, strings.Join(f.msgs, "\n")
}

// Decode decodes an answer's body as a T; where it does not decode, it records the failure
// with f and answers false.
func Decode[T any](f interface{ Add(string, ...any) }, what string, body []byte) (T, bool) {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		f.Add("decode %s: %v", what, err)
		return v, false
	}
	return v, true
}

// Every calls fn on a goroutine of its own once every interval, the first time one interval
// from now, until stop is called; stop waits for a call in progress to return.
func Every(interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fn()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

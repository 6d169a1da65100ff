package tests

// Real concurrency for the tests: goroutines held at one barrier and released at once, with
// their errors collected and reported on the test's own goroutine.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// raceRounds plays n rounds of a race, round i on a DAG id of its own (prefix_i), tallies the
// outcome each round names, logs the tally, and checks the invariants once all rounds are
// done.
func (e *env) raceRounds(n int, prefix string, round func(i int, dagID string) (outcome string)) {
	e.t.Helper()
	outcomes := map[string]int{}
	for i := range n {
		outcomes[round(i, fmt.Sprintf("%s_%d", prefix, i))]++
	}
	e.t.Logf("outcomes: %v", outcomes)
	checkInvariants(e.t, e.DB)
}

// releaseTogether runs fn(0) .. fn(n-1) on n goroutines held at one barrier and released at
// once, waits for all, and then fails the test with every error they returned. fn runs off
// the test's goroutine, so it reports through its error, never through require.
func releaseTogether(t testing.TB, n int, fn func(i int) error) {
	t.Helper()
	require.NoError(t, <-startTogether(n, n, fn))
}

// inParallel is releaseTogether on at most workers goroutines: for fixtures too many to
// build with one goroutine each.
func inParallel(t testing.TB, n, workers int, fn func(i int) error) {
	t.Helper()
	require.NoError(t, <-startTogether(n, workers, fn))
}

// startTogether starts fn(0) .. fn(n-1) on workers goroutines (goroutine g runs g, g+workers,
// ...) released at once from one barrier, and returns at once: the channel yields every
// error they returned, joined, when the last one is done. For a test that works on its own
// goroutine while they run.
func startTogether(n, workers int, fn func(i int) error) <-chan error {
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		done  = make(chan error, 1)
	)
	for g := range min(workers, n) {
		wg.Go(func() {
			<-start
			for i := g; i < n; i += workers {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%d: %w", i, err))
					mu.Unlock()
				}
			}
		})
	}
	close(start)
	go func() {
		wg.Wait()
		done <- errors.Join(errs...)
	}()
	return done
}

// request is one request of a burst.
type request struct {
	Method, Path string
	Body         any
	Headers      []string
}

// createRequest POSTs a backfill creation body.
func createRequest(body any, headers ...string) request {
	return request{Method: http.MethodPost, Path: "/api/v1/backfills", Body: body, Headers: headers}
}

// manualRunRequest triggers a manual run of the DAG.
func manualRunRequest(dagID string, logical time.Time) request {
	return request{Method: http.MethodPost, Path: "/api/v1/dags/" + url.PathEscape(dagID) + "/runs",
		Body: map[string]any{"logical_date": ts(logical)}}
}

// DoTogether sends the requests from one goroutine each, released together, and returns the
// answers in request order; every answer must have arrived and match the spec.
func (e *env) DoTogether(reqs ...request) []*response {
	e.t.Helper()
	out := make([]*response, len(reqs))
	releaseTogether(e.t, len(reqs), func(i int) error {
		var err error
		out[i], err = e.do(reqs[i].Method, reqs[i].Path, reqs[i].Body, reqs[i].Headers...)
		return err
	})
	return out
}

// doAsync sends a request on its own goroutine and delivers the answer on the channel, for a
// request that is to block while the test goes on; a transport error or a spec violation
// arrives as an answer with status -1 and the error as its body.
func (e *env) doAsync(method, path string, body any, headers ...string) <-chan *response {
	done := make(chan *response, 1)
	go func() {
		res, err := e.do(method, path, body, headers...)
		if err != nil {
			res = &response{Status: -1, Body: []byte(err.Error())}
		}
		done <- res
	}()
	return done
}

// try is call for goroutines other than the test's: an answer that did not arrive, breaks the
// spec, has another status than want or does not decode is its error.
func try[T any](e *env, want int, method, path string, body any, headers ...string) (T, error) {
	var out T
	res, err := e.do(method, path, body, headers...)
	if err != nil {
		return out, err
	}
	if res.Status != want {
		return out, fmt.Errorf("%s %s answered %d: %s", method, path, res.Status, res.Body)
	}
	return out, json.Unmarshal(res.Body, &out)
}

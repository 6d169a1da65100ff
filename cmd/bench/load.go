package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// newHTTPClient keeps up to conns idle connections to the service, so that a closed loop of
// that many clients never pays a TCP handshake after its first request.
func newHTTPClient(conns int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
		// A 100,000-slot creation takes seconds; the service's own write timeout is 2 min.
		Timeout: 3 * time.Minute,
	}
}

// call sends a JSON request and decodes the answer into out (unless nil); any status other
// than want is an error that quotes the body.
func call(ctx context.Context, c *http.Client, method, url string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return &statusError{method: method, url: url, got: resp.StatusCode, want: want, body: msg}
	}
	if out == nil {
		// Read to the end so that the connection goes back to the pool.
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// statusError is an answer with another status than the one wanted.
type statusError struct {
	method, url string
	got, want   int
	body        []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: status %d, want %d: %s", e.method, e.url, e.got, e.want, e.body)
}

// shed reports whether err is the service's 503: it refused the request before doing it.
func shed(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.got == http.StatusServiceUnavailable
}

// resendShed sends until the service does not shed the request (503 busy), as a closed-loop
// client does, counting each shed answer in refused; it answers send's last error.
func resendShed(ctx context.Context, refused *atomic.Int64, send func() error) error {
	for {
		err := send()
		if !shed(err) || ctx.Err() != nil {
			return err
		}
		refused.Add(1)
	}
}

// loadResult is what a closed loop measured.
type loadResult struct {
	ops     int
	elapsed time.Duration
	lat     []time.Duration // sorted
}

func (r loadResult) perSecond() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// quantile returns the q-quantile (0..1) of the latencies, nearest rank.
func (r loadResult) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q*float64(len(r.lat))+0.5) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// merge pools two measurements of the same thing (taken in halves, interleaved with others).
func (r loadResult) merge(o loadResult) loadResult {
	lat := append(slices.Clone(r.lat), o.lat...)
	slices.Sort(lat)
	return loadResult{ops: r.ops + o.ops, elapsed: r.elapsed + o.elapsed, lat: lat}
}

// closedLoop runs op back to back in each of workers goroutines for d and records every
// latency. The first error stops all workers and is returned.
func closedLoop(ctx context.Context, workers int, d time.Duration, op func(ctx context.Context, worker int) error) (loadResult, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		all      []time.Duration
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) && lctx.Err() == nil {
				t0 := time.Now()
				if err := op(lctx, w); err != nil {
					mu.Lock()
					if firstErr == nil && lctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					break
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return loadResult{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	slices.Sort(all)
	return loadResult{ops: len(all), elapsed: elapsed, lat: all}, nil
}

//go:build faults

package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxBody is the service's body limit (handlers.MaxBodyBytes), restated: this package tests
// the binary from outside.
const maxBody = 1 << 20

// TestServerLimits checks the real binary's limits from outside:
//
//   - a client that never finishes its headers is disconnected after ReadHeaderTimeout (5 s);
//   - headers over MaxHeaderBytes (64 KiB) are 431;
//   - a body over 1 MiB is 413 payload_too_large, sent with Content-Length or chunked;
//   - a statement that outruns DB_STATEMENT_TIMEOUT is canceled by PostgreSQL: the creation
//     answers 503 and writes nothing, while small requests keep working;
//   - DB_MAX_CONNS bounds the pool: 24 concurrent requests on a pool of 2 all succeed, and
//     the process never holds more than 2 sessions.
func TestServerLimits(t *testing.T) {
	tdb := newTestDB(t)
	srv := startProc(t, "bf_limits", tdb.DSN, "SWEEP_INTERVAL=1s")
	c := newClient(srv.URL, true)
	c.must(t, http.MethodPut, "/api/v1/dags/lim", map[string]any{"schedule": "@daily"}, 201)

	// Slowloris: headers that never end.
	slow := make(chan time.Duration, 1)
	go func() {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			slow <- -1
			return
		}
		defer conn.Close()
		start := time.Now()
		_, _ = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "))
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.Copy(io.Discard, conn) // returns when the server closes the connection
		slow <- time.Since(start)
	}()

	t.Run("body over 1 MiB", func(t *testing.T) {
		before := countRows(t, tdb.DB)
		big := []byte(`{"dag_id":"lim","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-03T00:00:00Z","description":"` +
			strings.Repeat("x", maxBody) + `"}`)
		for _, tc := range []struct {
			name    string
			method  string
			path    string
			body    func() io.Reader
			chunked bool
		}{
			{"Content-Length", http.MethodPost, "/api/v1/backfills", func() io.Reader { return bytes.NewReader(big) }, false},
			{"chunked", http.MethodPost, "/api/v1/backfills", func() io.Reader { return io.MultiReader(bytes.NewReader(big)) }, true},
			{"chunked PUT dag", http.MethodPut, "/api/v1/dags/lim2", func() io.Reader {
				return io.MultiReader(strings.NewReader(`{"schedule":"@daily","description":"`), strings.NewReader(strings.Repeat("y", maxBody)), strings.NewReader(`"}`))
			}, true},
			{"chunked claim", http.MethodPost, "/api/v1/runs/claim", func() io.Reader {
				return io.MultiReader(strings.NewReader(`{"worker_id":"`), strings.NewReader(strings.Repeat("w", 2*maxBody)), strings.NewReader(`"}`))
			}, true},
		} {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, tc.body())
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.chunked {
				req.ContentLength = -1
			}
			res, err := c.http.Do(req)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"payload_too_large"`) ||
				res.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: want 413 payload_too_large, got %d %s", tc.name, res.StatusCode, body)
			}
		}
		// Exactly 1 MiB is read (and refused for what it says, not for its size).
		exact := []byte(`{"schedule":"@daily","description":"` + strings.Repeat("z", maxBody-len(`{"schedule":"@daily","description":""}`)) + `"}`)
		if len(exact) != maxBody {
			t.Fatalf("exact body is %d bytes", len(exact))
		}
		a, err := c.do(context.Background(), http.MethodPut, "/api/v1/dags/lim3", exact)
		if err != nil || a.Status != http.StatusBadRequest {
			t.Errorf("a body of exactly 1 MiB: want 400 (description too long), got %v %v", a, err)
		}
		if after := countRows(t, tdb.DB); after != before {
			t.Errorf("oversized requests wrote rows: %+v -> %+v", before, after)
		}
	})

	t.Run("header over 64 KiB", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Big", strings.Repeat("h", 80<<10))
		res, err := c.http.Do(req)
		if err != nil {
			t.Fatalf("a request with an 80 KiB header: %v", err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a request with an 80 KiB header: want 431, got %d", res.StatusCode)
		}
	})

	t.Run("statement timeout", func(t *testing.T) {
		tdb2 := newTestDB(t)
		p := startProc(t, "bf_stmt_timeout", tdb2.DSN, "DB_STATEMENT_TIMEOUT=250ms", "SWEEP_INTERVAL=1s")
		c2 := newClient(p.URL, true)
		c2.must(t, http.MethodPut, "/api/v1/dags/big", map[string]any{"schedule": "* * * * *"}, 201)
		start := time.Now()
		a := c2.must(t, http.MethodPost, "/api/v1/backfills", bigBackfillBody("big"), 503)
		took := time.Since(start)
		if got := a.Problem().Code; got != "timeout" || a.Header.Get("Retry-After") == "" {
			t.Errorf("a creation canceled by statement_timeout: want 503 timeout with Retry-After, got %s", a)
		}
		if strings.Contains(string(a.Body), "statement timeout") || strings.Contains(string(a.Body), "canceling") {
			t.Errorf("the 503 carries internal error text: %s", a.Body)
		}
		if got := countRows(t, tdb2.DB); got != (counts{}) {
			t.Errorf("the canceled creation left rows: %+v", got)
		}
		timedOut := false
		for _, l := range p.Logs() {
			if strings.Contains(l, "statement timeout") {
				timedOut = true
			}
		}
		if !timedOut {
			t.Errorf("the server log does not show a statement timeout")
		}
		c2.must(t, http.MethodPut, "/api/v1/dags/small", map[string]any{"schedule": "@daily"}, 201)
		c2.must(t, http.MethodPost, "/api/v1/backfills", map[string]any{"dag_id": "small", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-10T00:00:00Z"}, 201)
		c2.must(t, http.MethodGet, "/readyz", nil, 200)
		t.Logf("DB_STATEMENT_TIMEOUT=250ms: the 100,000-run creation answered 503 timeout after %s and wrote nothing; a 10-run creation answered 201", took.Round(time.Millisecond))
	})

	t.Run("bounded pool", func(t *testing.T) {
		tdb3 := newTestDB(t)
		// A long admission wait: this is about the pool's bound, not about shedding, so the
		// 24 clients queue for admission instead of being answered 503 busy.
		p := startProc(t, "bf_small_pool", tdb3.DSN, "DB_MAX_CONNS=2", "SWEEP_INTERVAL=100ms", "ADMISSION_WAIT=1m")
		c3 := newClient(p.URL, true)
		for i := range 8 {
			c3.must(t, http.MethodPut, fmt.Sprintf("/api/v1/dags/pool_%d", i), map[string]any{"schedule": "@hourly"}, 201)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var fails []string
		tally := statusTally{}
		stop := make(chan struct{})
		peak := 0
		var sampler sync.WaitGroup
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := backends(t, tdb3.Name)["bf_small_pool"]
				mu.Lock()
				peak = max(peak, n)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
		start := time.Now()
		for i := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				for j := range 5 {
					var a *answer
					var err error
					switch (i + j) % 4 {
					case 0:
						from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, 10*j)
						a, err = c3.do(ctx, http.MethodPost, "/api/v1/backfills", map[string]any{"dag_id": fmt.Sprintf("pool_%d", i%8),
							"from_date": ts(from), "to_date": ts(from.AddDate(0, 0, 3))})
					case 1:
						a, err = c3.do(ctx, http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": fmt.Sprintf("pw%d", i), "limit": 3})
					case 2:
						a, err = c3.do(ctx, http.MethodPost, "/api/v1/backfills/dry_run", map[string]any{"dag_id": fmt.Sprintf("pool_%d", i%8),
							"from_date": "2023-01-01T00:00:00Z", "to_date": "2023-03-01T00:00:00Z"})
					default:
						a, err = c3.do(ctx, http.MethodGet, "/api/v1/backfills?limit=100", nil)
					}
					mu.Lock()
					switch {
					case err != nil:
						fails = append(fails, err.Error())
					case a.Status >= 500:
						fails = append(fails, a.String())
					default:
						tally.add(a.Status)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		close(stop)
		sampler.Wait()
		if len(fails) > 0 {
			t.Errorf("%d of 120 requests on a pool of 2 failed:\n%s", len(fails), strings.Join(fails[:min(10, len(fails))], "\n"))
		}
		if peak > 2 {
			t.Errorf("the process held %d sessions with DB_MAX_CONNS=2", peak)
		}
		t.Logf("DB_MAX_CONNS=2: 24 clients × 5 requests answered in %s (%s), at most %d sessions seen", took.Round(time.Millisecond), tally.String(), peak)
	})

	d := <-slow
	if d < 0 {
		t.Fatal("slowloris: could not connect")
	}
	if d < 4*time.Second || d > 15*time.Second {
		t.Errorf("a client that never finished its headers was disconnected after %s, want about 5 s (ReadHeaderTimeout)", d)
	}
	t.Logf("ReadHeaderTimeout: a client that never finished its headers was disconnected after %s", d.Round(10*time.Millisecond))

	// The server answered every limit with a clean problem and never logged a panic.
	for _, l := range srv.Logs() {
		if strings.Contains(l, `"panic"`) {
			t.Errorf("panic logged: %s", l)
		}
	}
}

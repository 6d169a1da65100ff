//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSigtermEndsEventStreams: SIGTERM ends open Server-Sent Events streams cleanly (the
// client reads the end of the stream, not a reset) as draining begins, so the process exits 0
// long before SHUTDOWN_TIMEOUT instead of waiting for streams that would never end alone.
func TestSigtermEndsEventStreams(t *testing.T) {
	tdb := newTestDB(t)
	srv := startProc(t, "bf_events_term", tdb.DSN, "SHUTDOWN_TIMEOUT=60s")
	c := newClient(srv.URL, true)
	c.must(t, http.MethodPut, "/api/v1/dags/ev_term", map[string]any{"schedule": "@daily"}, 201)
	created := c.must(t, http.MethodPost, "/api/v1/backfills", map[string]any{
		"dag_id": "ev_term", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-05T00:00:00Z"}, 201)
	var b struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(created.Body, &b); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const streams = 3
	ended := make(chan error, streams)
	for range streams {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/backfills/"+strconv.FormatInt(b.ID, 10)+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: status %d", resp.StatusCode)
		}
		r := bufio.NewReader(resp.Body)
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "id: ") {
			t.Fatalf("first line %q: %v", line, err)
		}
		go func() {
			defer resp.Body.Close()
			_, err := io.Copy(io.Discard, r)
			ended <- err
		}()
	}

	start := time.Now()
	srv.Signal(syscall.SIGTERM)
	for range streams {
		if err := <-ended; err != nil {
			t.Fatalf("a stream did not end cleanly: %v", err)
		}
	}
	code, err := srv.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("exit code %d, want 0\n%s", code, srv.Stderr())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %v to exit with SHUTDOWN_TIMEOUT=60s: the streams held the drain", d)
	}
	if !srv.HasLog("stopped") {
		t.Fatal(`no "stopped" log line`)
	}
}

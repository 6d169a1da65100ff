//go:build ha

package ha

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A replica whose sessions reach the standby (during a failover, before HAProxy's check has
// moved) answers writes 503 and reads as usual, and none of its sessions is spoiled for the
// requests after. One was: the event notifier's "BEGIN; ...; pg_notify; COMMIT", refused by
// the standby, left its pooled session in a failed transaction block, and every request on it
// was answered 500 (25P02) until the pool retired it (CI, 2026-12-03: 122 of them after the
// crash of the leader). Here a service is pointed at the standby alone, with a pool of two.
func TestServiceOnAStandbyAnswersWritesUnavailableAndReadsAsUsual(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, waitSettled(ctx, 90*time.Second))
	standby, lead := 0, leader()
	for _, n := range nodes {
		if n.name != lead {
			standby = n.pg
		}
	}
	const addr = "127.0.0.1:28990"
	svc := exec.CommandContext(ctx, filepath.Join(haDir, "bin", "api"))
	svc.Env = append(os.Environ(),
		fmt.Sprintf("DATABASE_URL=postgres://postgres@127.0.0.1:%d/backfill?sslmode=disable", standby),
		"HTTP_ADDR="+addr, "DB_MAX_CONNS=2", "DB_LEASE_MAX_CONNS=1", "DB_RECONNECT_WAIT=300ms")
	var logs strings.Builder
	svc.Stdout, svc.Stderr = &logs, &logs
	require.NoError(t, svc.Start())
	defer func() {
		_ = svc.Process.Kill()
		_ = svc.Wait()
		if t.Failed() {
			t.Logf("the service's log:\n%s", logs.String())
		}
	}()
	base := "http://" + addr + "/api/v1"
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/dags")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "the service did not start on the standby")

	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for round := range 10 {
		// The writes are refused by the standby; a DAG's deletion also kicks the notifier,
		// whose NOTIFY the standby refuses too. The reads after them share the two sessions.
		for _, w := range []struct{ method, path, body string }{
			{http.MethodPut, "/dags/ha-standby-probe", `{"schedule": "@daily", "timezone": "UTC"}`},
			{http.MethodDelete, "/dags/ha-standby-probe", ""},
			{http.MethodPost, "/runs/claim", `{"worker_id": "ha-standby-probe", "limit": 1}`},
		} {
			status, body := do(w.method, w.path, w.body)
			require.Equal(t, http.StatusServiceUnavailable, status, "round %d: %s %s: %s", round, w.method, w.path, body)
			require.Contains(t, body, `"unavailable"`)
		}
		time.Sleep(20 * time.Millisecond) // the notifier's gap: its NOTIFY goes out meanwhile
		for _, path := range []string{"/dags?limit=5", "/backfills?limit=5", "/dags/ha-standby-probe"} {
			status, body := do(http.MethodGet, path, "")
			require.Less(t, status, 500, "round %d: GET %s: %s", round, path, body)
		}
	}
}

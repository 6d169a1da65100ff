//go:build faults

package faults

import (
	"context"
	"fmt"
	"github.com/lib/pq"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
)

// TestPostgresNoWritableHost runs two situations where the database answers but cannot take
// a write, one after the other on one primary/standby pair (a pair costs seconds to make):
//
//  1. The synchronous standby is gone, so every commit on the primary waits for it.
//     Readiness must see that (a ping does not), and a client that timed out and retries
//     with its Idempotency-Key must not be told `Idempotent-Replayed: true` for a backfill
//     committed on the primary alone (a failover would then lose it): the replay waits for
//     the standby like the creation does. Once the standby is back, the retry answers 201
//     and the backfill is on the standby.
//  2. Every host answers but none accepts writes: the answer is 503 `unavailable`, never
//     500, and /readyz is 503. Two services see it: one on a multi-host DSN whose primary
//     was set read-only (target_session_attrs=read-write then refuses both hosts at
//     connect), and one through a proxy that now leads to the standby (every transaction
//     fails with 25006).
func TestPostgresNoWritableHost(t *testing.T) {
	pair := newPGPair(t, "nw")
	px := startFailoverProxy(t, pair.primary.addr())
	multi := startProc(t, "bf_nw_multi", pair.multiHostDSN(), "DB_RECONNECT_WAIT=1s")
	proxied := startProc(t, "bf_nw_proxy", fmt.Sprintf("postgres://postgres@%s/backfill?sslmode=disable", px.addr), "DB_RECONNECT_WAIT=1s")
	synchronousStandbyLost(t, pair, multi)
	allHostsReadOnly(t, pair, px, multi, proxied)
}

func synchronousStandbyLost(t *testing.T, pair *pgPair, srv *proc) {
	c := newClient(srv.URL, true)
	c.must(t, http.MethodPut, "/api/v1/dags/sync_a", map[string]any{"schedule": "@daily"}, 201)
	c.must(t, http.MethodGet, "/readyz", nil, 200)

	runPG(t, "pg_ctl", "-D", pair.standby.data(), "-m", "fast", "-w", "stop")

	start := time.Now()
	c.must(t, http.MethodGet, "/readyz", nil, 503)
	readyTook := time.Since(start)
	if readyTook > 3*time.Second {
		t.Errorf("/readyz took %s to see commits hang; want about 2 s", readyTook)
	}
	c.must(t, http.MethodGet, "/api/v1/dags/sync_a", nil, 200) // reads still work there

	body := map[string]any{"dag_id": "sync_a", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"}
	post := func(timeout time.Duration) (*answer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.do(ctx, http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", "sync-key")
	}
	// The first attempt's COMMIT waits for the standby; the client gives up (and the server
	// cancels the wait: the backfill is then committed on the primary alone).
	if a, err := post(1500 * time.Millisecond); err == nil {
		t.Fatalf("a creation answered while its commit could not be replicated: %s", a)
	}
	// The retry must not acknowledge it either.
	a, err := post(2 * time.Second)
	if err == nil {
		t.Errorf("a retry with the same Idempotency-Key answered %s (replayed %q) while the backfill was on the primary alone",
			a, a.Header.Get("Idempotent-Replayed"))
	}
	pair.standby.start()
	var final *answer
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if final, err = post(5 * time.Second); err == nil && final.Status == http.StatusCreated {
			break
		}
	}
	if final == nil || final.Status != http.StatusCreated {
		t.Fatalf("after the standby came back the retry answered %v, %v", final, err)
	}
	b := decode[api.Backfill](t, final)
	var n int
	if err := pair.standby.open("backfill").Get(&n, `SELECT count(*) FROM backfills WHERE id = $1`, b.Id); err != nil || n != 1 {
		t.Errorf("backfill %d answered 201 is not on the standby (%d, %v)", b.Id, n, err)
	}
	t.Logf("synchronous standby stopped: /readyz 503 after %s; a creation and its retry with the same key both waited (no 201); standby back: 201 (Idempotent-Replayed %q), on the standby",
		readyTook.Round(time.Millisecond), final.Header.Get("Idempotent-Replayed"))
}

func allHostsReadOnly(t *testing.T, pair *pgPair, px *failoverProxy, multi, proxied *proc) {
	cm, cp := newClient(multi.URL, true), newClient(proxied.URL, true)
	cm.must(t, http.MethodPut, "/api/v1/dags/ro_a", map[string]any{"schedule": "@daily"}, 201)
	cp.must(t, http.MethodPut, "/api/v1/dags/ro_b", map[string]any{"schedule": "@daily"}, 201)
	cm.must(t, http.MethodGet, "/readyz", nil, 200)
	cp.must(t, http.MethodGet, "/readyz", nil, 200)

	// The primary becomes read-only for new sessions, the services' sessions on it are ended
	// (as an operator fencing it would), and the proxy now leads to the standby.
	pdb := pair.primary.open("postgres")
	for _, q := range []string{`ALTER SYSTEM SET default_transaction_read_only = on`, `SELECT pg_reload_conf()`} {
		if _, err := pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var ended []int64
	if err := pdb.QueryRow(`SELECT coalesce(array_agg(pid), '{}') FROM (
		SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'bf_nw_%') t`).Scan(pq.Array(&ended)); err != nil {
		t.Fatal(err)
	}
	// pg_terminate_backend only signals: until a backend has exited, a statement written to
	// its session may reach it and be answered with FATAL, an outcome nobody can know. The
	// scenario is sessions that are gone, which the service finds dead before it writes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left int
		if err := pdb.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pq.Array(ended)).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ended sessions still there after 10 s", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
	px.switchTo(pair.standby.addr())

	// The write is a statement of its own (a pool's PUT): the standby's refusal is its answer
	// at once. A transaction (a DAG's PUT, since its upstreams are written with it) rides the
	// refusal as a failover for DB_RECONNECT_WAIT and then answers "no writable database host".
	for _, tc := range []struct {
		name   string
		c      *client
		detail string
	}{
		{"multi-host DSN", cm, "no writable database host"},
		{"proxy to the standby", cp, "accepts no writes"},
	} {
		start := time.Now()
		a := tc.c.must(t, http.MethodPut, "/api/v1/pools/ro_c", map[string]any{"slots": 1}, 503)
		took := time.Since(start)
		p := a.Problem()
		if p.Code != "unavailable" || a.Header.Get("Retry-After") == "" || !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("%s: want 503 unavailable with Retry-After and a detail saying %q, got %s", tc.name, tc.detail, a)
		}
		r := tc.c.must(t, http.MethodGet, "/readyz", nil, 503)
		t.Logf("%s: a write answered 503 %s after %s (DB_RECONNECT_WAIT=1s): %q; /readyz %d",
			tc.name, p.Code, took.Round(time.Millisecond), p.Detail, r.Status)
	}
	for _, p := range []*proc{multi, proxied} {
		for _, l := range p.LogsWithLevel("ERROR") {
			if strings.Contains(l, `"internal error"`) {
				t.Errorf("%s logged an internal error (a 500): %s", p.name, l)
			}
		}
	}
}

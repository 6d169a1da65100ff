//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
)

// TestTableLocksAreWaitedForAtMostLockWait: while another session holds a table lock (what an
// operator's LOCK TABLE or a migration's ALTER TABLE takes), a write of one statement and a
// read of that table answer 503 busy within LOCK_WAIT, nothing written, instead of waiting
// for the holder. A statement sets its own share of LOCK_WAIT only once it runs, after its
// table locks, so those were bounded by statement_timeout alone (an audit, 2026-12-06:
// PATCHes waited 7–12 s behind LOCK TABLE, then answered 200); the pools' sessions now have
// LOCK_WAIT as their lock_timeout. The binary is the one that sets it (cmd/api), hence a
// test of the real process. Once the holds end, the same requests succeed.
func TestTableLocksAreWaitedForAtMostLockWait(t *testing.T) {
	tdb := newTestDB(t)
	const lockWait = time.Second
	srv := startProc(t, "bf_table_lock", tdb.DSN, "LOCK_WAIT="+lockWait.String(), "SWEEP_INTERVAL=1h")
	c := newClient(srv.URL, true)
	c.must(t, http.MethodPut, "/api/v1/dags/tl", map[string]any{"schedule": "@daily"}, 201)
	b := decode[api.Backfill](t, c.must(t, http.MethodPost, "/api/v1/backfills",
		map[string]any{"dag_id": "tl", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"}, 201))
	patch := fmt.Sprintf("/api/v1/backfills/%d", b.Id)

	ctx := context.Background()
	hold, err := tdb.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback() }()
	for _, q := range []string{
		`LOCK TABLE backfills IN SHARE MODE`,           // writes wait, reads do not
		`LOCK TABLE webhooks IN ACCESS EXCLUSIVE MODE`, // reads wait too
	} {
		if _, err := hold.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}

	for _, r := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPatch, patch, map[string]any{"max_active_runs": 7}},
		{http.MethodPut, patch + "/pause", nil},
		{http.MethodGet, "/api/v1/webhooks", nil},
	} {
		start := time.Now()
		a, err := c.do(ctx, r.method, r.path, r.body)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		if a.Status != http.StatusServiceUnavailable || a.Problem().Code != "busy" {
			t.Fatalf("%s %s behind a held table: want 503 busy, got %s after %v", r.method, r.path, a, took)
		}
		// A generous bound on a busy machine: it came back instead of waiting for the holder.
		if took > lockWait+3*time.Second {
			t.Errorf("%s %s answered after %v, LOCK_WAIT is %v", r.method, r.path, took, lockWait)
		}
	}
	// Reads of the table held in SHARE mode are served meanwhile.
	c.must(t, http.MethodGet, patch, nil, http.StatusOK)
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}

	got := decode[api.Backfill](t, c.must(t, http.MethodGet, patch, nil, http.StatusOK))
	if got.MaxActiveRuns == 7 || got.State != "running" {
		t.Fatalf("a refused write was applied: %+v", got)
	}
	c.must(t, http.MethodPatch, patch, map[string]any{"max_active_runs": 7}, http.StatusOK)
	c.must(t, http.MethodGet, "/api/v1/webhooks", nil, http.StatusOK)
}

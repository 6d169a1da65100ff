//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
)

// TestReadinessBesideASaturatedPool: a replica whose every pooled session waits on a held
// row is busy, not broken. /readyz must still prove a write at once (readiness has a session
// of its own), or a load balancer pulls a healthy replica whenever one row is held; on the
// main pool the probe queued behind the parked requests and answered 503 after its 2 s. The
// parked requests then finish once the row is released.
func TestReadinessBesideASaturatedPool(t *testing.T) {
	tdb := newTestDB(t)
	const app = "bf_ready_busy"
	// A pool of 2 admits 3 requests at once (ADMISSION_MAX_IN_FLIGHT's floor): both sessions
	// park on the row and the third request waits for one of them.
	srv := startProc(t, app, tdb.DSN, "DB_MAX_CONNS=2", "LOCK_WAIT=20s", "ADMISSION_WAIT=30s", "SWEEP_INTERVAL=1h")
	c := newClient(srv.URL, true)
	c.must(t, http.MethodPut, "/api/v1/dags/busy", map[string]any{"schedule": "@daily"}, 201)
	b := decode[api.Backfill](t, c.must(t, http.MethodPost, "/api/v1/backfills",
		map[string]any{"dag_id": "busy", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"}, 201))

	ctx := context.Background()
	hold, err := tdb.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback() }()
	if _, err := hold.ExecContext(ctx, `SELECT 1 FROM backfills WHERE id = $1 FOR UPDATE`, b.Id); err != nil {
		t.Fatal(err)
	}

	const parked = 3
	var wg sync.WaitGroup
	answers := make([]string, parked)
	for i := range parked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			a, err := c.do(rctx, http.MethodPatch, fmt.Sprintf("/api/v1/backfills/%d", b.Id), map[string]any{"max_active_runs": 2 + i})
			if err != nil {
				answers[i] = err.Error()
				return
			}
			answers[i] = fmt.Sprint(a.Status)
		}()
	}
	waitLockWaiters(t, tdb, app, 2)

	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	a, err := c.do(rctx, http.MethodGet, "/readyz", nil)
	cancel()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("/readyz beside a saturated pool: %v", err)
	}
	if a.Status != http.StatusOK {
		t.Errorf("/readyz beside a saturated pool answered %s after %s, want 200", a, took.Round(time.Millisecond))
	}

	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range answers {
		if got != "200" {
			t.Errorf("parked PATCH %d answered %s after the row was released, want 200", i, got)
		}
	}
	t.Logf("/readyz answered %d in %s while both pooled sessions waited on a held row; the %d parked PATCHes answered %v",
		a.Status, took.Round(time.Millisecond), parked, answers)
}

// waitLockWaiters waits until n sessions of app wait on a lock.
func waitLockWaiters(t *testing.T, tdb *testDB, app string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := admin(t).Get(&waiting, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = $2 AND wait_event_type = 'Lock'`, tdb.Name, app); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of %s wait on a lock after 30 s, want %d", waiting, app, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

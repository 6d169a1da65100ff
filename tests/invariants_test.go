package tests

// The database invariant checks of the run-lifecycle tests (lifecycle, claim, cancel, lease,
// race), and reads of runs straight from the database.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/testkit/invariants"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runByID reads a run straight from the database.
type dbRun struct {
	ID             int64      `db:"id"`
	State          string     `db:"state"`
	Attempt        int        `db:"attempt"`
	WorkerID       *string    `db:"worker_id"`
	BackfillID     *int64     `db:"backfill_id"`
	StartDate      *time.Time `db:"start_date"`
	EndDate        *time.Time `db:"end_date"`
	LeaseExpiresAt *time.Time `db:"lease_expires_at"`
}

func runByID(t testing.TB, db *sqlx.DB, id int64) dbRun {
	t.Helper()
	var r dbRun
	require.NoError(t, db.Get(&r, `SELECT id, state, attempt, worker_id, backfill_id, start_date, end_date,
		lease_expires_at FROM dag_runs WHERE id = $1`, id))
	return r
}

// runStates counts a backfill's runs by state straight from dag_runs.
func runStates(t testing.TB, db *sqlx.DB, backfillID int64) map[string]int64 {
	t.Helper()
	rows := []struct {
		State string `db:"state"`
		N     int64  `db:"n"`
	}{}
	require.NoError(t, db.Select(&rows,
		`SELECT state, count(*) AS n FROM dag_runs WHERE backfill_id = $1 GROUP BY state`, backfillID))
	out := map[string]int64{}
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out
}

// requireProgressExact compares GET progress with a fresh count of runs by state (plus
// skipped slots) and with the slot listing, and returns the backfill.
func requireProgressExact(t testing.TB, e *env, id int64) api.Backfill {
	t.Helper()
	b := e.GetBackfill(id)
	states := runStates(t, e.DB, id)
	var skipped int64
	require.NoError(t, e.DB.Get(&skipped,
		`SELECT count(*) FROM backfill_dag_runs WHERE backfill_id = $1 AND dag_run_id IS NULL`, id))
	want := api.BackfillProgress{
		Queued:   states["queued"],
		Running:  states["running"],
		Success:  states["success"],
		Failed:   states["failed"],
		Canceled: states["canceled"],
		Skipped:  skipped,
	}
	want.Total = want.Queued + want.Running + want.Success + want.Failed + want.Canceled + want.Skipped
	require.Equal(t, want, b.Progress, "progress of backfill %d vs database", id)

	fromSlots := api.BackfillProgress{}
	for _, s := range e.Slots(id) {
		fromSlots.Total++
		if s.State == nil {
			fromSlots.Skipped++
			continue
		}
		switch *s.State {
		case "queued":
			fromSlots.Queued++
		case "running":
			fromSlots.Running++
		case "success":
			fromSlots.Success++
		case "failed":
			fromSlots.Failed++
		case "canceled":
			fromSlots.Canceled++
		}
	}
	require.Equal(t, want, fromSlots, "progress of backfill %d vs its slot listing", id)
	return b
}

// invariantReport is what one invariant check saw.
type invariantReport = invariants.Report

// terminalRow is the part of a terminal backfill that must never change again.
type terminalRow = invariants.TerminalRow

// checkInvariants runs invariants.Check and reports each violation with t.Errorf, so it may
// run on any goroutine while the test runs.
func checkInvariants(t testing.TB, db *sqlx.DB) invariantReport {
	t.Helper()
	rep, err := invariants.Check(context.Background(), db)
	assert.NoError(t, err)
	for _, v := range rep.Violations {
		t.Errorf("%s", v)
	}
	return rep
}

// activeButFinished lists active backfills none of whose runs is queued or running: the
// ones a sweep pass should have finalized.
func activeButFinished(t testing.TB, db *sqlx.DB) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, db.Select(&ids, `
		SELECT b.id FROM backfills b
		WHERE b.state IN ('running', 'paused', 'canceling')
		  AND NOT EXISTS (SELECT 1 FROM dag_runs r WHERE r.backfill_id = b.id AND r.state IN ('queued', 'running'))
		ORDER BY b.id`))
	return ids
}

// violationRecorder captures the violations checkInvariants reports instead of failing the test.
type violationRecorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (r *violationRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *violationRecorder) joined() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// The checker is not vacuous: it passes on a sound database and reports each kind of
// corruption (made by hand, behind the service's back).
func TestInvariantsCheckerDetectsViolations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, d := range []string{"lc_inv_a", "lc_inv_b", "lc_inv_c"} {
		e.PutDag(d, "@daily", "")
	}
	a := e.CreateBackfill(backfillBody("lc_inv_a", day(1, 1), day(1, 3), "max_active_runs", 2))
	b := e.CreateBackfill(backfillBody("lc_inv_b", day(1, 1), day(1, 3), "max_active_runs", 2))
	c := e.CreateBackfill(backfillBody("lc_inv_c", day(1, 1), day(1, 3)))
	require.Len(t, e.ClaimWith(map[string]any{"worker_id": "w", "limit": 2, "dag_id": "lc_inv_a"}), 2)

	clean := &violationRecorder{TB: t}
	stats := checkInvariants(clean, e.DB)
	require.Empty(t, clean.joined())
	require.Equal(t, 3, stats.Backfills)
	require.Equal(t, 3, stats.Active)
	require.Equal(t, 2, stats.PeakRunning)
	require.Equal(t, 2, stats.PeakMax)

	// (c): lower a's cap below its running runs.
	_, err := e.DB.Exec(`UPDATE backfills SET max_active_runs = 1 WHERE id = $1`, a.Id)
	require.NoError(t, err)
	// (a) and (d): b terminal with queued runs, its counters zeroed to pass the CHECK.
	_, err = e.DB.Exec(`UPDATE backfills SET state = 'succeeded', completed_at = now(), num_queued = 0 WHERE id = $1`, b.Id)
	require.NoError(t, err)
	// (d): c's counter off by one.
	_, err = e.DB.Exec(`UPDATE backfills SET num_success = num_success + 1 WHERE id = $1`, c.Id)
	require.NoError(t, err)

	rec := &violationRecorder{TB: t}
	stats = checkInvariants(rec, e.DB)
	out := rec.joined()
	require.Contains(t, out, fmt.Sprintf("invariant (c) violated: backfill %d (running) has 2 running runs, max_active_runs 1", a.Id))
	require.Contains(t, out, "invariant (a) terminal backfill without unfinished runs violated")
	require.Contains(t, out, fmt.Sprintf(`"backfill_id": %d, "backfill_state": "succeeded"`, b.Id))
	require.Contains(t, out, fmt.Sprintf(`invariant (d) counters equal slot counts violated: {"id": %d`, b.Id))
	require.Contains(t, out, fmt.Sprintf(`invariant (d) counters equal slot counts violated: {"id": %d`, c.Id))
	require.Contains(t, out, fmt.Sprintf(`invariant (d) counters equal run counts violated: {"id": %d`, c.Id))
	require.Equal(t, 2.0, stats.PeakRatio)
	require.Contains(t, stats.Terminal, b.Id)

	require.NotContains(t, out, "invariant (e)")

	// (e): a succeeded backfill that counts a failed run.
	_, err = e.DB.Exec(`UPDATE backfills SET num_failed = 1 WHERE id = $1`, b.Id)
	require.NoError(t, err)
	rec = &violationRecorder{TB: t}
	checkInvariants(rec, e.DB)
	require.Contains(t, rec.joined(), fmt.Sprintf(`invariant (e) terminal state agrees with the runs violated: {"id": %d`, b.Id))

	// The stale-active probe.
	require.Empty(t, activeButFinished(t, e.DB))
	_, err = e.DB.Exec(`UPDATE dag_runs SET state = 'success' WHERE backfill_id = $1`, c.Id)
	require.NoError(t, err)
	require.Equal(t, []int64{c.Id}, activeButFinished(t, e.DB))
}

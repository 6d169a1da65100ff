package tests

// Shared helpers of the run-lifecycle tests (lifecycle, claim, cancel, lease, race): small
// request wrappers and the database invariant checks. Every name starts with lc.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/invariants"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const lcClaimPath = "/api/v1/runs/claim"

func lcBackfillPath(id int64) string { return fmt.Sprintf("/api/v1/backfills/%d", id) }

func lcRunPath(dagID, runID string) string { return "/api/v1/dags/" + dagID + "/runs/" + runID }

func lcHeartbeatPath(id int64) string { return fmt.Sprintf("/api/v1/runs/%d/heartbeat", id) }

// lcPutDag creates or replaces a DAG with extra body fields (max_active_runs, is_paused, ...).
func lcPutDag(e *env, dagID, schedule string, extra ...any) api.Dag {
	e.t.Helper()
	body := map[string]any{"schedule": schedule}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	res := e.Do(http.MethodPut, "/api/v1/dags/"+dagID, body)
	require.Contains(e.t, []int{http.StatusOK, http.StatusCreated}, res.Status, "body: %s", res.Body)
	var d api.Dag
	res.Decode(e.t, &d)
	return d
}

// lcCreateManualRun triggers a manual run that must be created.
func lcCreateManualRun(e *env, dagID string, logical time.Time) api.DagRun {
	e.t.Helper()
	res := e.Do(http.MethodPost, "/api/v1/dags/"+dagID+"/runs", map[string]any{"logical_date": ts(logical)})
	require.Equal(e.t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var r api.DagRun
	res.Decode(e.t, &r)
	return r
}

// lcGetRun reads one run.
func lcGetRun(e *env, dagID, runID string) api.DagRun {
	e.t.Helper()
	res := e.Do(http.MethodGet, lcRunPath(dagID, runID), nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var r api.DagRun
	res.Decode(e.t, &r)
	return r
}

// lcClaimBody claims with an explicit body and requires 200.
func lcClaimBody(e *env, body map[string]any) []api.DagRun {
	e.t.Helper()
	res := e.Do(http.MethodPost, lcClaimPath, body)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var c api.ClaimResponse
	res.Decode(e.t, &c)
	return c.Runs
}

// lcPatch PATCHes a run's state; worker may be "" (no worker_id).
func lcPatch(e *env, dagID, runID, state, worker string) *response {
	e.t.Helper()
	body := map[string]any{"state": state}
	if worker != "" {
		body["worker_id"] = worker
	}
	return e.Do(http.MethodPatch, lcRunPath(dagID, runID), body)
}

// lcHeartbeat sends a heartbeat.
func lcHeartbeat(e *env, id int64, worker string) *response {
	e.t.Helper()
	return e.Do(http.MethodPost, lcHeartbeatPath(id), map[string]any{"worker_id": worker})
}

// lcAction PUTs pause, unpause or cancel.
func lcAction(e *env, id int64, action string) *response {
	e.t.Helper()
	return e.Do(http.MethodPut, lcBackfillPath(id)+"/"+action, nil)
}

// lcActionOK PUTs pause, unpause or cancel, requires 200 and returns the backfill.
func lcActionOK(e *env, id int64, action string) api.Backfill {
	e.t.Helper()
	res := lcAction(e, id, action)
	require.Equal(e.t, http.StatusOK, res.Status, "%s: body: %s", action, res.Body)
	var b api.Backfill
	res.Decode(e.t, &b)
	require.Equal(e.t, id, b.Id)
	return b
}

// lcRequireProblem requires a problem answer with this status and code.
func lcRequireProblem(t testing.TB, res *response, status int, code string) api.Problem {
	t.Helper()
	require.Equal(t, status, res.Status, "body: %s", res.Body)
	p := res.Problem(t)
	require.Equal(t, code, string(p.Code), "body: %s", res.Body)
	require.EqualValues(t, status, p.Status)
	return p
}

// lcRequireTime compares instants.
func lcRequireTime(t testing.TB, want time.Time, got *time.Time, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, got, msgAndArgs...)
	require.True(t, want.Equal(*got), "want %s, got %s %v", want.UTC(), got.UTC(), fmt.Sprint(msgAndArgs...))
}

// lcRunByID reads a run straight from the database.
type lcDBRun struct {
	ID             int64      `db:"id"`
	State          string     `db:"state"`
	Attempt        int        `db:"attempt"`
	WorkerID       *string    `db:"worker_id"`
	BackfillID     *int64     `db:"backfill_id"`
	StartDate      *time.Time `db:"start_date"`
	EndDate        *time.Time `db:"end_date"`
	LeaseExpiresAt *time.Time `db:"lease_expires_at"`
}

func lcRunByID(t testing.TB, db *sqlx.DB, id int64) lcDBRun {
	t.Helper()
	var r lcDBRun
	require.NoError(t, db.Get(&r, `SELECT id, state, attempt, worker_id, backfill_id, start_date, end_date,
		lease_expires_at FROM dag_runs WHERE id = $1`, id))
	return r
}

// lcRunStates counts a backfill's runs by state straight from dag_runs.
func lcRunStates(t testing.TB, db *sqlx.DB, backfillID int64) map[string]int64 {
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

// lcRequireProgressExact compares GET progress with a fresh count of runs by state (plus
// skipped slots) and with the slot listing, and returns the backfill.
func lcRequireProgressExact(t testing.TB, e *env, id int64) api.Backfill {
	t.Helper()
	b := e.GetBackfill(id)
	states := lcRunStates(t, e.DB, id)
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

// lcInvariantStats is what one invariant check saw.
type lcInvariantStats = invariants.Report

// lcTerminalRow is the part of a terminal backfill that must never change again.
type lcTerminalRow = invariants.TerminalRow

// lcCheckInvariants runs invariants.Check and reports each violation with t.Errorf, so it may
// run on any goroutine while the test runs.
func lcCheckInvariants(t testing.TB, db *sqlx.DB) lcInvariantStats {
	t.Helper()
	rep, err := invariants.Check(context.Background(), db)
	assert.NoError(t, err)
	for _, v := range rep.Violations {
		t.Errorf("%s", v)
	}
	return rep
}

// lcActiveButFinished lists active backfills none of whose runs is queued or running: the
// ones a sweep pass should have finalized.
func lcActiveButFinished(t testing.TB, db *sqlx.DB) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, db.Select(&ids, `
		SELECT b.id FROM backfills b
		WHERE b.state IN ('running', 'paused', 'canceling')
		  AND NOT EXISTS (SELECT 1 FROM dag_runs r WHERE r.backfill_id = b.id AND r.state IN ('queued', 'running'))
		ORDER BY b.id`))
	return ids
}

// lcRecorder captures the violations lcCheckInvariants reports instead of failing the test.
type lcRecorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (r *lcRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *lcRecorder) joined() string {
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
	require.Len(t, lcClaimBody(e, map[string]any{"worker_id": "w", "limit": 2, "dag_id": "lc_inv_a"}), 2)

	clean := &lcRecorder{TB: t}
	stats := lcCheckInvariants(clean, e.DB)
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

	rec := &lcRecorder{TB: t}
	stats = lcCheckInvariants(rec, e.DB)
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
	rec = &lcRecorder{TB: t}
	lcCheckInvariants(rec, e.DB)
	require.Contains(t, rec.joined(), fmt.Sprintf(`invariant (e) terminal state agrees with the runs violated: {"id": %d`, b.Id))

	// The stale-active probe.
	require.Empty(t, lcActiveButFinished(t, e.DB))
	_, err = e.DB.Exec(`UPDATE dag_runs SET state = 'success' WHERE backfill_id = $1`, c.Id)
	require.NoError(t, err)
	require.Equal(t, []int64{c.Id}, lcActiveButFinished(t, e.DB))
}

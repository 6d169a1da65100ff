package tests

// Bulk paths at 100,000 runs, each on a warmed pooled connection: the pool is cut to one
// connection, and before the bulk change that connection has run every small path (the sweep,
// claims, reports, heartbeats, a small cancel and a small reprocess), so every plan PL/pgSQL
// caches for the counter trigger was made for a handful of rows. That is how a 15,000-run
// cancel once took 49.7 s instead of 1.3 s (CHANGELOG.md, 2026-12-01). These tests assert the
// outcome and that the counters agree with the runs, never a time: a quadratic path shows up
// as a test that does not finish.

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/stretchr/testify/require"
)

// scaleRuns is the largest backfill the contract allows.
const scaleRuns = 100_000

// scaleEnd is the last slot of every scale window (minutely DAGs: N slots are N minutes).
var scaleEnd = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func scaleWindow(dagID string, n int, extra ...any) map[string]any {
	return backfillBody(dagID, scaleEnd.Add(-time.Duration(n-1)*time.Minute), scaleEnd, extra...)
}

// newScaleEnv is an env whose whole pool is one connection, warmed by every small path.
func newScaleEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("100,000-run backfills; skipped with -short")
	}
	e := newEnv(t, opts...)
	e.DB.SetMaxOpenConns(1)
	e.DB.SetMaxIdleConns(1)
	scaleWarm(t, e)
	return e
}

// scaleWarm runs the small paths first. The very first change of dag_runs on the connection
// changes no row at all (a sweep with nothing to expire), as in a service that starts.
func scaleWarm(t *testing.T, e *env) {
	t.Helper()
	e.SweepOnce()
	const dag = "scale_warm"
	e.PutDag(dag, "* * * * *", "")
	b := e.CreateBackfill(scaleWindow(dag, 20, "max_active_runs", 10))
	runs := e.ClaimN(4, "warm", 4)
	require.Equal(t, http.StatusOK, e.Heartbeat(runs[0].Id, "warm").Status)
	require.Equal(t, http.StatusConflict, e.Heartbeat(runs[0].Id, "someone_else").Status)
	e.Report(runs[0], "success")
	e.Report(runs[1], "failed")
	e.Clock.Advance(time.Hour) // the other two leases expire
	e.SweepOnce()
	require.Equal(t, api.BackfillState("canceled"), e.ActionOK(b.Id, "cancel").State)
	e.SweepOnce()
	r := e.CreateBackfill(scaleWindow(dag, 20, "reprocess_behavior", "failed"))
	require.EqualValues(t, 19, r.Progress.Queued, "every slot but the successful one is reprocessed")
	require.Equal(t, api.BackfillState("canceled"), e.ActionOK(r.Id, "cancel").State)
	e.SweepOnce()
	scaleRequireCounters(t, e, b.Id)
	scaleRequireCounters(t, e, r.Id)
}

// scaleRequireCounters compares the counters GET answers with a count of the backfill's slots
// by the state the slot listing shows (the run's state, or its state at the takeover when a
// later backfill took the run over; skipped slots have no run), and returns the backfill.
// That count reads the backfill_dag_runs columns itself, not the view the service reads, so
// that a wrong view cannot agree with itself.
func scaleRequireCounters(t *testing.T, e *env, id int64) api.Backfill {
	t.Helper()
	b := e.GetBackfill(id)
	rows := []struct {
		State *string `db:"state"`
		N     int64   `db:"n"`
	}{}
	require.NoError(t, e.DB.Select(&rows, `
		SELECT coalesce(nx.prior_state, r.state) AS state, count(*) AS n
		FROM backfill_dag_runs s LEFT JOIN dag_runs r ON r.id = s.dag_run_id
		LEFT JOIN backfill_dag_runs nx ON nx.dag_run_id = s.dag_run_id AND nx.prior_backfill_id = s.backfill_id
		WHERE s.backfill_id = $1 GROUP BY 1`, id))
	var want api.BackfillProgress
	for _, r := range rows {
		want.Total += r.N
		switch {
		case r.State == nil:
			want.Skipped = r.N
		case *r.State == "queued":
			want.Queued = r.N
		case *r.State == "running":
			want.Running = r.N
		case *r.State == "success":
			want.Success = r.N
		case *r.State == "failed":
			want.Failed = r.N
		case *r.State == "canceled":
			want.Canceled = r.N
		}
	}
	require.Equal(t, want, b.Progress, "counters of backfill %d vs its slots", id)
	// An active backfill's runs are exactly its slots' runs: nothing was taken from it.
	if b.State == "running" || b.State == "paused" || b.State == "canceling" {
		var owned int64
		require.NoError(t, e.DB.Get(&owned, `SELECT count(*) FROM dag_runs WHERE backfill_id = $1`, id))
		require.Equal(t, want.Total-want.Skipped, owned, "runs of active backfill %d", id)
	}
	return b
}

// scaleSetRuns moves every run of a backfill to state behind the service's back (no API hands
// out 100,000 leases at once), in one statement, so that the counter trigger keeps the
// counters as it does for every change; extra is more SET assignments.
func scaleSetRuns(t *testing.T, e *env, backfillID int64, state, extra string) {
	t.Helper()
	res, err := e.DB.Exec(`UPDATE dag_runs SET state = $2`+extra+` WHERE backfill_id = $1`, backfillID, state)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, scaleRuns, n)
}

func TestScaleCancelOf100kRunsOnWarmConnection(t *testing.T) {
	t.Parallel()
	e := newScaleEnv(t)
	const dag = "scale_cancel"
	e.PutDag(dag, "* * * * *", "")
	b := e.CreateBackfill(scaleWindow(dag, scaleRuns))
	require.EqualValues(t, scaleRuns, b.Progress.Queued)

	c := e.ActionOK(b.Id, "cancel")
	require.Equal(t, api.BackfillState("canceled"), c.State)
	require.NotNil(t, c.CompletedAt)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Canceled: scaleRuns}, c.Progress)
	require.Equal(t, c.Progress, scaleRequireCounters(t, e, b.Id).Progress)
	require.Equal(t, map[string]int64{"canceled": scaleRuns}, runStates(t, e.DB, b.Id))

	// The DAG is free again at once.
	next := e.CreateBackfill(scaleWindow(dag, 10, "reprocess_behavior", "none"))
	require.EqualValues(t, 10, next.Progress.Skipped)
}

// 100,000 leases expire together; the sweep works them off in batches (each batch reads only
// its own runs), fails them at MAX_ATTEMPTS 1, and finalizes the backfill. A backfill of the
// same window with reprocess_behavior failed then takes all 100,000 runs over.
func TestScaleLeaseExpiryFinalizeAndReprocessFailedOf100kRuns(t *testing.T) {
	t.Parallel()
	e := newScaleEnv(t, withMaxAttempts(1))
	const dag = "scale_expiry"
	e.PutDag(dag, "* * * * *", "")
	b := e.CreateBackfill(scaleWindow(dag, scaleRuns))
	scaleSetRuns(t, e, b.Id, "running",
		`, worker_id = 'bulk', start_date = backfill_now(), lease_seconds = 60, lease_expires_at = backfill_now() + interval '60 seconds'`)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Running: scaleRuns}, scaleRequireCounters(t, e, b.Id).Progress)

	e.Clock.Advance(time.Minute)
	sw := sweeper.New(e.Store, sweeper.Config{Batch: 1000, MaxBatches: 20})
	passes := 0
	for ; passes < 10 && e.GetBackfill(b.Id).State == "running"; passes++ {
		require.NoError(t, sw.RunOnce(context.Background()))
	}
	// 20 batches of 1,000 per pass: five passes expire everything, and the fifth finalizes.
	require.Equal(t, 5, passes)
	got := scaleRequireCounters(t, e, b.Id)
	require.Equal(t, api.BackfillState("failed"), got.State)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Failed: scaleRuns}, got.Progress)
	require.Equal(t, map[string]int64{"failed": scaleRuns}, runStates(t, e.DB, b.Id))

	r := e.CreateBackfill(scaleWindow(dag, scaleRuns, "reprocess_behavior", "failed"))
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Queued: scaleRuns}, scaleRequireCounters(t, e, r.Id).Progress)
	require.Equal(t, map[string]int64{"queued": scaleRuns}, runStates(t, e.DB, r.Id))
	// The parent's record shows its runs as they were when they were taken over.
	old := scaleRequireCounters(t, e, b.Id)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Failed: scaleRuns}, old.Progress)
	require.Equal(t, got.UpdatedAt, old.UpdatedAt, "the terminal backfill's row is untouched")
}

// 100,000 successful runs finalize their backfill as succeeded; a backfill of the same window
// with reprocess_behavior completed takes every run over, and cancelling it cancels them all.
func TestScaleFinalizeAndReprocessCompletedOf100kRuns(t *testing.T) {
	t.Parallel()
	e := newScaleEnv(t)
	const dag = "scale_completed"
	e.PutDag(dag, "* * * * *", "")
	b := e.CreateBackfill(scaleWindow(dag, scaleRuns))
	scaleSetRuns(t, e, b.Id, "success", `, start_date = backfill_now(), end_date = backfill_now()`)
	e.SweepOnce()
	got := scaleRequireCounters(t, e, b.Id)
	require.Equal(t, api.BackfillState("succeeded"), got.State)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Success: scaleRuns}, got.Progress)

	r := e.CreateBackfill(scaleWindow(dag, scaleRuns, "reprocess_behavior", "completed"))
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Queued: scaleRuns}, scaleRequireCounters(t, e, r.Id).Progress)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Success: scaleRuns}, scaleRequireCounters(t, e, b.Id).Progress)

	c := e.ActionOK(r.Id, "cancel")
	require.Equal(t, api.BackfillState("canceled"), c.State)
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Canceled: scaleRuns}, scaleRequireCounters(t, e, r.Id).Progress)
	require.Equal(t, map[string]int64{"canceled": scaleRuns}, runStates(t, e.DB, r.Id))
	require.Equal(t, api.BackfillProgress{Total: scaleRuns, Success: scaleRuns}, scaleRequireCounters(t, e, b.Id).Progress,
		fmt.Sprintf("backfill %d keeps the record of its runs", b.Id))
}

package tests

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// steadyExecutor runs a backfill's runs on the database's clock: each run takes runTime, and
// every tick it reports the runs whose time is up and claims as many as the service gives
// (the backfill's max_active_runs decides how many run at once).
type steadyExecutor struct {
	e        *env
	dag      string
	runTime  time.Duration
	tick     time.Duration
	inFlight map[string]stampedRun
	// claimLimit, when set, is the most runs the executor keeps running (0: as many as the
	// service gives).
	claimLimit int
}

type stampedRun struct {
	run     api.DagRun
	started time.Time
}

// runFor moves the clock forward by d, tick by tick, executing.
func (x *steadyExecutor) runFor(d time.Duration) {
	x.e.t.Helper()
	until := x.e.Clock.Now().Add(d)
	for x.e.Clock.Now().Before(until) {
		x.step()
	}
}

// step moves the clock one tick: reports the runs that are done, then claims.
func (x *steadyExecutor) step() {
	x.e.t.Helper()
	x.e.Clock.Advance(x.tick)
	now := x.e.Clock.Now()
	for id, r := range x.inFlight {
		if !r.started.Add(x.runTime).After(now) {
			x.e.Report(r.run, "success")
			delete(x.inFlight, id)
		}
	}
	want := 100
	if x.claimLimit > 0 {
		want = x.claimLimit - len(x.inFlight)
	}
	if want <= 0 {
		return
	}
	for _, r := range x.e.ClaimDag("steady", x.dag, want) {
		x.inFlight[r.RunId] = stampedRun{run: r, started: now}
	}
}

// getETA reads eta_seconds as GET /backfills/{id} answers it (null and absent read as nil).
func getETA(e *env, id int64) *float64 {
	e.t.Helper()
	var body struct {
		EtaSeconds *float64 `json:"eta_seconds"`
	}
	res := e.Do(http.MethodGet, backfillPath(id), nil)
	require.Equal(e.t, http.StatusOK, res.Status)
	res.Decode(e.t, &body)
	return body.EtaSeconds
}

// eta_seconds comes from the recent pace at the current limits: 30 s after max_active_runs
// goes from 4 to 1, on an executor whose runs take 1 s each, it is within 25 % of the time
// the backfill then really takes to finish. It is null until 2 runs have succeeded, null
// while paused, restarts (null again) at the unpause, and 0 once nothing is left.
func TestETAFollowsThePaceAfterALimitChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const slots = 150
	b := e.DailyBackfill("eta", day(1, 1), day(1, 1).AddDate(0, 0, slots-1), "max_active_runs", 4)
	x := &steadyExecutor{e: e, dag: "eta", runTime: time.Second, tick: 500 * time.Millisecond, inFlight: map[string]stampedRun{}}

	require.Nil(t, getETA(e, b.Id), "no pace before any run has succeeded")
	x.runFor(10 * time.Second)
	before := getETA(e, b.Id)
	require.NotNil(t, before)
	left := float64(e.GetBackfill(b.Id).Progress.Queued + e.GetBackfill(b.Id).Progress.Running)
	require.InEpsilon(t, left/4, *before, 0.25, "at 4 runs of 1 s at once, %v left", left)

	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 1})
	x.runFor(30 * time.Second)
	eta := getETA(e, b.Id)
	require.NotNil(t, eta)
	start := e.Clock.Now()
	for e.GetBackfill(b.Id).State == api.BackfillStateRunning {
		x.step()
		e.SweepOnce()
	}
	actual := e.Clock.Now().Sub(start).Seconds()
	t.Logf("30 s after the limit change: eta_seconds %.1f, the backfill then took %.1f s (average pace since creation would say %.1f)",
		*eta, actual, averagePaceETA(e, b.Id, start, actual))
	require.LessOrEqual(t, math.Abs(*eta-actual), 0.25*actual, "eta_seconds %.1f against %.1f s", *eta, actual)
	got := e.GetBackfill(b.Id)
	require.Equal(t, api.BackfillStateSucceeded, got.State)
	require.Nil(t, getETA(e, b.Id), "a finished backfill has no ETA, as every other answer says")
}

// averagePaceETA is what the old estimate (the average pace since creation) would have said
// at start, for the test's log.
func averagePaceETA(e *env, id int64, at time.Time, _ float64) float64 {
	var figures struct {
		Done float64 `db:"done"`
		Left float64 `db:"left_"`
		Age  float64 `db:"age"`
	}
	require.NoError(e.t, e.DB.Get(&figures, `
		SELECT count(*) FILTER (WHERE end_date <= $2) AS done,
		       count(*) FILTER (WHERE end_date IS NULL OR end_date > $2) AS left_,
		       extract(epoch FROM $2::timestamptz - (SELECT created_at FROM backfills WHERE id = $1)) AS age
		FROM dag_runs WHERE backfill_id = $1`, id, at))
	return figures.Left * figures.Age / figures.Done
}

// A pause makes eta_seconds null; the unpause restarts the pace, so it stays null until 2
// runs have succeeded since.
func TestETARestartsAfterAPause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("eta_pause", day(1, 1), day(1, 30), "max_active_runs", 2)
	x := &steadyExecutor{e: e, dag: "eta_pause", runTime: time.Second, tick: 500 * time.Millisecond, inFlight: map[string]stampedRun{}}
	x.runFor(5 * time.Second)
	require.NotNil(t, getETA(e, b.Id))
	e.ActionOK(b.Id, "pause")
	require.Nil(t, getETA(e, b.Id), "null while paused")
	e.Clock.Advance(time.Minute)
	e.ActionOK(b.Id, "unpause")
	require.Nil(t, getETA(e, b.Id), "the pace restarts at the unpause")
	for step := 0; getETA(e, b.Id) == nil; step++ {
		require.Less(t, step, 20, "the pace is known again within 10 s of steady runs")
		x.step()
	}
	var since int
	require.NoError(t, e.DB.Get(&since, `
		SELECT count(*) FROM dag_runs r JOIN backfills b ON b.id = r.backfill_id
		WHERE b.id = $1 AND r.state = 'success' AND r.end_date >= b.pace_since`, b.Id))
	require.GreaterOrEqual(t, since, 2, "known from 2 successes after the restart")
}

// The ETA's pace is the window's: after 5 minutes at 4 runs at once and 6 more at 1, a pace
// restarts nowhere (no limit change since the first), yet eta_seconds follows the last 5
// minutes, not the average since the start. And a fast backfill counts its newest 500
// successes only: at 40 runs at once of 1 s, 5 minutes hold 12,000; the ETA still follows
// the pace. Both come from the counters on the backfill row (00034), never from a read of
// its runs: deleting the runs' history under a running backfill leaves eta_seconds as it was.
func TestETAFollowsTheLastFiveMinutesAndItsNewest500(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const slots = 4000
	e.PutDag("eta_window", "@hourly", "")
	b := e.CreateBackfill(backfillBody("eta_window", day(1, 1), day(1, 1).Add((slots-1)*time.Hour), "max_active_runs", 40))
	x := &steadyExecutor{e: e, dag: "eta_window", runTime: time.Second, tick: 500 * time.Millisecond, inFlight: map[string]stampedRun{}}

	x.runFor(30 * time.Second)
	left := func() float64 {
		p := e.GetBackfill(b.Id).Progress
		return float64(p.Queued + p.Running)
	}
	eta := getETA(e, b.Id)
	require.NotNil(t, eta)
	require.InEpsilon(t, left()/40, *eta, 0.25, "at 40 runs of 1 s at once, over 500 successes in the window")

	// The executor slows to 4 runs at once without a limit change (it claims fewer): the
	// window forgets the fast minutes within 5 minutes and 15 s.
	x.claimLimit = 4
	x.runFor(5*time.Minute + 30*time.Second)
	eta = getETA(e, b.Id)
	require.NotNil(t, eta)
	require.InEpsilon(t, left()/4, *eta, 0.25, "the last 5 minutes ran 4 at a time")

	// The ETA reads no run: with the successes' rows gone, it is what it was.
	_, err := e.DB.Exec(`DELETE FROM dag_runs WHERE backfill_id = $1 AND state = 'success'`, b.Id)
	require.NoError(t, err)
	again := getETA(e, b.Id)
	require.NotNil(t, again)
	require.InDelta(t, *eta, *again, 0.5)
}

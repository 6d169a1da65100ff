package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// The sweep finalizes a backfill only once every run is terminal, in one pass, and the DAG is
// then free for a new backfill.
func TestLifecycleSweepFinalizesOnceAllRunsAreTerminal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// lastState is what the last run reports; the others report success.
		lastState string
		want      api.BackfillState
	}{
		{"all success", "success", "succeeded"},
		{"one failed", "failed", "failed"},
		{"one canceled", "canceled", "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			b := e.DailyBackfill("lc_final", day(1, 1), day(1, 5))
			require.Equal(t, api.BackfillState("running"), b.State)
			require.Nil(t, b.CompletedAt)

			// Right after creation no number of passes finishes it.
			for range 5 {
				e.SweepOnce()
			}
			got := requireProgressExact(t, e, b.Id)
			require.Equal(t, api.BackfillState("running"), got.State)
			require.Nil(t, got.CompletedAt)
			require.EqualValues(t, 5, got.Progress.Queued)

			runs := e.ClaimN(5, "w1", 10)
			e.SweepOnce()
			require.Equal(t, api.BackfillState("running"), e.GetBackfill(b.Id).State)

			for _, r := range runs[:4] {
				e.Report(r, "success")
			}
			e.SweepOnce()
			got = requireProgressExact(t, e, b.Id)
			require.Equal(t, api.BackfillState("running"), got.State, "one run still runs")
			require.Nil(t, got.CompletedAt)

			e.Report(runs[4], tc.lastState)
			// Terminal only through the sweep: the report itself does not finish it.
			got = e.GetBackfill(b.Id)
			require.Equal(t, api.BackfillState("running"), got.State)
			require.Nil(t, got.CompletedAt)

			e.Clock.Advance(7 * time.Second)
			e.SweepOnce()
			got = requireProgressExact(t, e, b.Id)
			require.Equal(t, tc.want, got.State)
			require.False(t, got.IsPaused)
			requireInstant(t, e.Clock.Now(), got.CompletedAt, "completed_at")
			require.EqualValues(t, 0, got.Progress.Queued+got.Progress.Running)

			// A terminal backfill's record never changes again.
			e.Clock.Advance(time.Minute)
			e.SweepOnce()
			again := e.GetBackfill(b.Id)
			require.Equal(t, got, again)

			next := e.CreateBackfill(backfillBody("lc_final", day(2, 1), day(2, 3)))
			require.Equal(t, api.BackfillState("running"), next.State)
			checkInvariants(t, e.DB)
		})
	}
}

// A paused backfill whose runs are all finished is finalized too; terminal backfills refuse
// pause, unpause and cancel.
func TestLifecyclePausedBackfillFinalizes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_paused_final", day(1, 1), day(1, 3))
	runs := e.ClaimN(3, "w1", 10)

	p := e.ActionOK(b.Id, "pause")
	require.Equal(t, api.BackfillState("paused"), p.State)
	require.True(t, p.IsPaused)

	// Running runs of a paused backfill go on and report.
	e.Report(runs[0], "success")
	e.Report(runs[1], "success")
	e.SweepOnce()
	require.Equal(t, api.BackfillState("paused"), e.GetBackfill(b.Id).State)
	e.Report(runs[2], "success")
	e.SweepOnce()
	got := requireProgressExact(t, e, b.Id)
	require.Equal(t, api.BackfillState("succeeded"), got.State)
	require.False(t, got.IsPaused)
	requireInstant(t, e.Clock.Now(), got.CompletedAt, "completed_at")

	for _, action := range []string{"pause", "unpause", "cancel"} {
		requireProblem(t, e.Action(b.Id, action), http.StatusConflict, "backfill_not_active")
	}
	require.Equal(t, got, e.GetBackfill(b.Id), "a refused action changes nothing")

	// A paused backfill with queued runs only, all marked done without running, finalizes too.
	b2 := e.CreateBackfill(backfillBody("lc_paused_final", day(2, 1), day(2, 2), "description", "second"))
	e.ActionOK(b2.Id, "pause")
	for _, s := range e.Slots(b2.Id) {
		e.MarkRun("lc_paused_final", *s.RunId, "failed")
	}
	e.SweepOnce()
	got2 := requireProgressExact(t, e, b2.Id)
	require.Equal(t, api.BackfillState("failed"), got2.State)
	require.NotNil(t, got2.CompletedAt)
	checkInvariants(t, e.DB)
}

// Pause and unpause answers, on every state.
func TestLifecyclePauseUnpauseAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_pause", day(1, 1), day(1, 4))

	p := e.ActionOK(b.Id, "pause")
	require.Equal(t, api.BackfillState("paused"), p.State)
	require.True(t, p.IsPaused)
	require.Nil(t, p.CompletedAt)
	require.Equal(t, p.State, e.GetBackfill(b.Id).State)

	p = e.ActionOK(b.Id, "pause")
	require.Equal(t, api.BackfillState("paused"), p.State, "pausing a paused backfill is 200")
	require.True(t, p.IsPaused)

	u := e.ActionOK(b.Id, "unpause")
	require.Equal(t, api.BackfillState("running"), u.State)
	require.False(t, u.IsPaused)

	u = e.ActionOK(b.Id, "unpause")
	require.Equal(t, api.BackfillState("running"), u.State, "unpausing a running backfill is 200")
	require.False(t, u.IsPaused)

	// Canceling: one run runs, so cancel leaves it canceling.
	runs := e.ClaimN(1, "w1", 1)
	c := e.ActionOK(b.Id, "cancel")
	require.Equal(t, api.BackfillState("canceling"), c.State)
	require.False(t, c.IsPaused)
	requireProblem(t, e.Action(b.Id, "pause"), http.StatusConflict, "backfill_not_active")
	requireProblem(t, e.Action(b.Id, "unpause"), http.StatusConflict, "backfill_not_active")
	require.Equal(t, api.BackfillState("canceling"), e.GetBackfill(b.Id).State)

	// Terminal.
	e.Report(runs[0], "canceled")
	e.SweepOnce()
	require.Equal(t, api.BackfillState("canceled"), e.GetBackfill(b.Id).State)
	for _, action := range []string{"pause", "unpause", "cancel"} {
		requireProblem(t, e.Action(b.Id, action), http.StatusConflict, "backfill_not_active")
	}

	// Unknown ids.
	for _, action := range []string{"pause", "unpause", "cancel"} {
		requireProblem(t, e.Action(987654321, action), http.StatusNotFound, "backfill_not_found")
	}
	requireProblem(t, e.Do(http.MethodGet, backfillPath(987654321), nil), http.StatusNotFound, "backfill_not_found")
	checkInvariants(t, e.DB)
}

// Claims never hand out runs of a paused backfill; unpausing makes them claimable again.
func TestLifecycleClaimsSkipPausedBackfill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_pclaim", day(1, 1), day(1, 4))
	e.ActionOK(b.Id, "pause")

	require.Empty(t, e.Claim("w1", 10))
	require.Empty(t, e.ClaimWith(map[string]any{"worker_id": "w1", "limit": 10, "dag_id": "lc_pclaim"}))
	require.EqualValues(t, 4, requireProgressExact(t, e, b.Id).Progress.Queued)

	e.ActionOK(b.Id, "unpause")
	runs := e.ClaimN(2, "w1", 2)

	// Paused again with two runs running: those go on, the rest waits.
	e.ActionOK(b.Id, "pause")
	require.Empty(t, e.Claim("w2", 10))
	for _, r := range runs {
		res := e.Heartbeat(r.Id, "w1")
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		e.Report(r, "success")
	}
	require.Empty(t, e.Claim("w2", 10))
	e.ActionOK(b.Id, "unpause")
	runs = e.ClaimN(2, "w2", 10)
	for _, r := range runs {
		require.Equal(t, b.Id, *r.BackfillId)
	}
	checkInvariants(t, e.DB)
}

// Progress stays exact through every kind of transition.
func TestLifecycleProgressStaysExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_progress"
	e.PutDag(dag, "@daily", "")
	// Two slots will be skipped: a finished manual run ("already exists") and a queued one
	// ("in flight").
	done := e.CreateManualRun(dag, day(1, 3), nil)
	res := e.PatchRun(dag, done.RunId, "success", "")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	e.CreateManualRun(dag, day(1, 4), nil)
	// The manual queued run must not be claimed by this test's workers: pause the DAG
	// (which stops runs outside backfills only).
	e.PutDagWith(dag, "@daily", "is_paused", true)

	b := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 8), "max_active_runs", 3))
	progress := func(q, r, s, f, c, sk int64) api.BackfillProgress {
		return api.BackfillProgress{Queued: q, Running: r, Success: s, Failed: f, Canceled: c, Skipped: sk,
			Total: q + r + s + f + c + sk}
	}
	step := func(name string, want api.BackfillProgress) api.Backfill {
		t.Helper()
		got := requireProgressExact(t, e, b.Id)
		require.Equal(t, want, got.Progress, "after %s", name)
		checkInvariants(t, e.DB)
		return got
	}
	step("creation", progress(6, 0, 0, 0, 0, 2))

	runs := e.Claim("w1", 10)
	require.Len(t, runs, 3, "max_active_runs 3")
	step("claim", progress(3, 3, 0, 0, 0, 2))

	e.Report(runs[0], "success")
	e.Report(runs[1], "failed")
	step("reports", progress(3, 1, 1, 1, 0, 2))

	// A queued run marked canceled without running.
	var queuedRunID string
	for _, s := range e.Slots(b.Id) {
		if s.State != nil && *s.State == "queued" {
			queuedRunID = *s.RunId
			break
		}
	}
	require.NotEmpty(t, queuedRunID)
	e.MarkRun(dag, queuedRunID, "canceled")
	step("queued -> canceled", progress(2, 1, 1, 1, 1, 2))

	// The remaining running run's lease expires: back to queued.
	e.Clock.Advance(301 * time.Second)
	e.SweepOnce()
	require.Equal(t, "queued", runByID(t, e.DB, runs[2].Id).State)
	step("lease expiry", progress(3, 0, 1, 1, 1, 2))

	e.ActionOK(b.Id, "pause")
	require.Empty(t, e.Claim("w2", 10))
	step("pause", progress(3, 0, 1, 1, 1, 2))
	e.ActionOK(b.Id, "unpause")
	runs = e.ClaimN(3, "w2", 10)
	step("claim after unpause", progress(0, 3, 1, 1, 1, 2))
	for _, r := range runs {
		e.Report(r, "success")
	}
	got := step("final reports", progress(0, 0, 4, 1, 1, 2))
	require.Equal(t, api.BackfillState("running"), got.State)

	e.SweepOnce()
	got = step("sweep", progress(0, 0, 4, 1, 1, 2))
	require.Equal(t, api.BackfillState("failed"), got.State)
	require.NotNil(t, got.CompletedAt)
}

// PATCH rules of a run report.
func TestLifecyclePatchRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "lc_patch"
	b := e.DailyBackfill(dag, day(1, 1), day(1, 8))
	runs := e.ClaimN(4, "w1", 4)
	e.Clock.Advance(5 * time.Second)
	now := e.Clock.Now()

	ok := func(r api.DagRun, state, worker string) api.DagRun {
		t.Helper()
		res := e.PatchRun(dag, r.RunId, state, worker)
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		var out api.DagRun
		res.Decode(t, &out)
		require.Equal(t, api.DagRunState(state), out.State)
		requireInstant(t, now, out.EndDate, "end_date")
		require.Nil(t, out.LeaseExpiresAt)
		require.Equal(t, out, e.GetRun(dag, r.RunId))
		return out
	}

	// running -> success | failed | canceled with the lease holder.
	out := ok(runs[0], "success", "w1")
	requireInstant(t, *runs[0].StartDate, out.StartDate, "start_date kept")
	ok(runs[1], "failed", "w1")

	// Another worker's report is refused and changes nothing.
	requireProblem(t, e.PatchRun(dag, runs[2].RunId, "success", "w2"), http.StatusConflict, "lease_lost")
	require.Equal(t, runs[2], e.GetRun(dag, runs[2].RunId))
	ok(runs[2], "canceled", "w1")

	// PATCH to running is never a transition: not on a running run, not on a queued one.
	requireProblem(t, e.PatchRun(dag, runs[3].RunId, "running", "w1"), http.StatusConflict, "invalid_transition")
	requireProblem(t, e.PatchRun(dag, runs[3].RunId, "running", ""), http.StatusConflict, "invalid_transition")
	require.Equal(t, runs[3], e.GetRun(dag, runs[3].RunId))

	// Without worker_id a running run may be reported by anyone.
	ok(runs[3], "success", "")

	// A terminal run does not move again.
	for _, r := range runs {
		for _, state := range []string{"success", "failed", "canceled", "running", "queued"} {
			requireProblem(t, e.PatchRun(dag, r.RunId, state, ""), http.StatusConflict, "invalid_transition")
		}
	}

	// queued -> success | failed | canceled without running.
	var queued []string
	for _, s := range e.Slots(b.Id) {
		if *s.State == "queued" {
			queued = append(queued, *s.RunId)
		}
	}
	require.Len(t, queued, 4)
	requireProblem(t, e.PatchRun(dag, queued[0], "running", ""), http.StatusConflict, "invalid_transition")
	requireProblem(t, e.PatchRun(dag, queued[0], "queued", ""), http.StatusConflict, "invalid_transition")
	for i, state := range []string{"success", "failed", "canceled"} {
		out := ok(api.DagRun{RunId: queued[i]}, state, "")
		require.Nil(t, out.WorkerId)
	}

	requireProblem(t, e.PatchRun(dag, "backfill__1999-01-01T00:00:00Z", "success", ""), http.StatusNotFound, "run_not_found")
	requireProblem(t, e.PatchRun(dag, "backfill__1999-01-01T00:00:00Z", "success", "w1"), http.StatusNotFound, "run_not_found")
	requireProblem(t, e.PatchRun("lc_no_such_dag", runs[0].RunId, "success", ""), http.StatusNotFound, "dag_not_found")
	requireProgressExact(t, e, b.Id)
	checkInvariants(t, e.DB)
}

// Pauses and unpauses racing on one active backfill all answer 200: the backfill is running or
// paused throughout, so none of them is "not active" (a toggle whose UPDATE found the other
// state, then read the state a concurrent toggle had just committed, answered 409). Each
// answer shows the state it asked for.
func TestLifecyclePauseUnpauseRaceAnswers200(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("lc_toggle_race", day(1, 1), day(1, 4))
	const rounds, pairs = 20, 4
	for range rounds {
		releaseTogether(t, 2*pairs, func(i int) error {
			action, want := "pause", api.BackfillState("paused")
			if i%2 == 1 {
				action, want = "unpause", "running"
			}
			res := e.Action(b.Id, action)
			if res.Status != http.StatusOK {
				return fmt.Errorf("%s: %d %s", action, res.Status, res.Body)
			}
			var got api.Backfill
			if err := json.Unmarshal(res.Body, &got); err != nil {
				return err
			}
			if got.State != want {
				return fmt.Errorf("%s answered the backfill %s", action, got.State)
			}
			return nil
		})
	}
	checkInvariants(t, e.DB)
}

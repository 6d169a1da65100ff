package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/testkit/invariants"
	"github.com/stretchr/testify/require"
)

func withPriorityAging(d time.Duration) envOption {
	return func(o *envOptions) { o.priorityAging = d }
}

// Claims serve the backfill of higher priority first, whatever their ages; a PATCH of
// priority decides the very next claim; runs outside backfills still come before all.
func TestPriorityClaimsHigherFirstAndPatchIsLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("prio_old", "@daily", "")
	e.PutDag("prio_new", "@daily", "")
	e.PutDag("prio_manual", "@daily", "")
	old := e.DailyBackfill("prio_old", day(1, 1), day(1, 10))
	require.Equal(t, int32(0), old.Priority, "priority defaults to 0")
	fresh := e.DailyBackfill("prio_new", day(1, 1), day(1, 10), "priority", 5)
	require.Equal(t, int32(5), fresh.Priority)
	require.Equal(t, int32(5), e.GetBackfill(fresh.Id).Priority)

	claimOne := func() api.DagRun {
		t.Helper()
		runs := e.Claim("w", 1)
		require.Len(t, runs, 1)
		return runs[0]
	}
	metrics := string(e.Do(http.MethodGet, "/metrics", nil).Body)
	require.Contains(t, metrics, `backfill_queued_runs_by_priority{priority="5"} 10`)
	require.Contains(t, metrics, `backfill_queued_runs_by_priority{priority="0"} 10`)
	require.Contains(t, metrics, `backfill_queued_runs_by_priority{priority="-10"} 0`, "every priority has a series")

	// Oldest first would take prio_old; priority 5 goes first.
	for range 3 {
		r := claimOne()
		require.Equal(t, "prio_new", r.DagId, "the higher priority is claimed first")
	}
	// A manual run still comes before every backfill.
	_, err := try[api.DagRun](e, http.StatusCreated, http.MethodPost, "/api/v1/dags/prio_manual/runs",
		map[string]any{"logical_date": ts(day(2, 1))})
	require.NoError(t, err)
	require.Equal(t, "prio_manual", claimOne().DagId)

	// PATCH is live: the next claim follows it.
	patched := e.PatchBackfill(old.Id, map[string]any{"priority": 10})
	require.Equal(t, int32(10), patched.Priority)
	for range 2 {
		require.Equal(t, "prio_old", claimOne().DagId, "the next claim follows the patched priority")
	}
	e.PatchBackfill(old.Id, map[string]any{"priority": -3})
	require.Equal(t, "prio_new", claimOne().DagId)

	// The change is an event whose snapshot carries the priority.
	var prios []int
	require.NoError(t, e.DB.Select(&prios, `
		SELECT (event_data(e)->'backfill'->>'priority')::int FROM events e
		WHERE backfill_id = $1 AND type = 'backfill.updated' ORDER BY id`, old.Id))
	require.Equal(t, []int{10, -3}, prios)

	checkInvariants(t, e.DB)
}

// A priority outside −10..10 is 422 invalid_priority on creation, dry run, PATCH and retry,
// and writes nothing; a null priority in a PATCH is 400.
func TestPriorityOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("prio_bad", "@daily", "")
	before := e.TableCounts()
	for _, bad := range []int{11, -11, 1000} {
		requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("prio_bad", day(1, 1), day(1, 2), "priority", bad)),
			http.StatusUnprocessableEntity, "invalid_priority")
		requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("prio_bad", day(1, 1), day(1, 2), "priority", bad)),
			http.StatusUnprocessableEntity, "invalid_priority")
	}
	require.Equal(t, before, e.TableCounts(), "a refused priority writes nothing")

	for i, ok := range []int{-10, 10} {
		b := e.DailyBackfill("prio_bad", day(2, 1+2*i), day(2, 2+2*i), "priority", ok)
		require.Equal(t, int32(ok), b.Priority)
		e.ActionOK(b.Id, "cancel")
		e.SweepOnce()
	}
	b := e.DailyBackfill("prio_bad", day(3, 1), day(3, 2), "priority", 4)
	requireProblem(t, e.Do(http.MethodPatch, backfillPath(b.Id), map[string]any{"priority": 11}),
		http.StatusUnprocessableEntity, "invalid_priority")
	requireProblem(t, e.Do(http.MethodPatch, backfillPath(b.Id), map[string]any{"priority": nil}),
		http.StatusBadRequest, "invalid_request")
	require.Equal(t, int32(4), e.GetBackfill(b.Id).Priority)
	e.ActionOK(b.Id, "cancel")
	e.SweepOnce()
	requireProblem(t, e.Do(http.MethodPost, retryPath(b.Id), map[string]any{"priority": -11}),
		http.StatusUnprocessableEntity, "invalid_priority")

	// A retry inherits the priority unless it gives one.
	retry := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(b.Id), nil)
	require.Equal(t, int32(4), retry.Priority)
	e.ActionOK(retry.Id, "cancel")
	e.SweepOnce()
	retry = call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(b.Id), map[string]any{"priority": -7})
	require.Equal(t, int32(-7), retry.Priority)
}

// Starvation: a priority −10 backfill under a steady stream of priority 10 work still gets
// claims, within PRIORITY_AGING × 20 of waiting. The priority 10 backfill is the older one
// (the existing fairness alone would favour it) and always claimable; claims of one run each
// come every aging/5 of the database's clock, each run reported at once. Each step checks
// the invariants oracle's bound on claim waits.
func TestLowPriorityIsNeverStarved(t *testing.T) {
	t.Parallel()
	const aging = 100 * time.Millisecond
	const step = aging / 5
	e := newEnv(t, withPriorityAging(aging))
	ctx := context.Background()
	e.PutDag("busy", "@daily", "")
	e.PutDag("patient", "@daily", "")
	e.DailyBackfill("busy", day(1, 1), day(12, 31), "priority", 10, "max_active_runs", 1000)
	created := e.Clock.Now()
	low := e.DailyBackfill("patient", day(1, 1), day(1, 10), "priority", -10)

	var served []time.Duration // the waits at which the low backfill got its claims
	lastServed := created
	for len(served) < 3 {
		e.Clock.Advance(step)
		runs := e.Claim("w", 1)
		require.Len(t, runs, 1, "there is always work to claim")
		r := runs[0]
		if r.BackfillId != nil && *r.BackfillId == low.Id {
			served = append(served, e.Clock.Now().Sub(lastServed))
			lastServed = e.Clock.Now()
		} else {
			require.Equal(t, "busy", r.DagId)
			require.LessOrEqual(t, e.Clock.Now().Sub(lastServed), 20*aging,
				"the priority −10 backfill waited past 20 agings")
		}
		e.Report(r, "success")
		violations, err := invariants.CheckClaimWaits(ctx, e.DB, aging)
		require.NoError(t, err)
		require.Empty(t, violations)
	}
	for i, w := range served {
		// Served at 20 agings of waiting, not before: priority 10 comes first until then.
		require.Equal(t, 20*aging, w, "claim %d of the low backfill after waiting %s", i+1, w)
	}
	checkInvariants(t, e.DB)
}

package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/stretchr/testify/require"
)

// Every event's data.backfill is what GET answers right after the change, byte for byte as
// JSON values: conf numbers beyond float64, a description, fractional-second timestamps, a
// cancel that changes the counts after the state in one transaction. Counter-only changes
// (claims, reports) write nothing.
func TestEventSnapshotEqualsGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.DailyBackfill("snap", day(1, 1), day(1, 4),
		"description", "events \"snapshot\"\nline two",
		"dag_run_conf", map[string]any{"big": 9007199254740993, "tenth": 0.1, "nested": []any{1, "x", nil}},
		"max_active_runs", 2)
	evs := evOf(e, created.Id)
	require.Equal(t, []string{"backfill.created"}, evTypes(evs))
	evRequireSnapshot(t, evs[0], evGetRaw(e, created.Id))
	require.Equal(t, created.Id, evs[0].BackfillID)
	require.Equal(t, "snap", evs[0].DagID)

	// A clock at a fractional second: timestamps keep their digits, trailing zeros dropped.
	e.Clock.Advance(1500 * time.Millisecond)
	e.ActionOK(created.Id, "pause")
	evs = evOf(e, created.Id)
	require.Equal(t, []string{"backfill.created", "backfill.paused"}, evTypes(evs))
	evRequireSnapshot(t, evs[1], evGetRaw(e, created.Id))
	require.NotNil(t, evs[1].Data.Reason)
	require.Equal(t, "user", *evs[1].Data.Reason)
	require.Contains(t, string(evs[1].Data.Backfill), `.5Z"`)

	// Pausing a paused backfill changes nothing and writes nothing.
	e.ActionOK(created.Id, "pause")
	e.Clock.Advance(250 * time.Millisecond)
	e.ActionOK(created.Id, "unpause")
	evs = evOf(e, created.Id)
	require.Equal(t, []string{"backfill.created", "backfill.paused", "backfill.unpaused"}, evTypes(evs))
	evRequireSnapshot(t, evs[2], evGetRaw(e, created.Id))
	require.Nil(t, evs[2].Data.Reason)

	// Claims and reports move counters only: no event.
	runs := e.ClaimN(2, "w1", 2)
	e.Report(runs[0], "success")
	require.Len(t, evOf(e, created.Id), 3)

	// Cancel with a run still running: canceling, with the queued runs already canceled in
	// the snapshot (the same transaction changed the counts after the state).
	e.ActionOK(created.Id, "cancel")
	evs = evOf(e, created.Id)
	require.Equal(t, "backfill.canceling", evs[3].Type)
	get := evGetRaw(e, created.Id)
	evRequireSnapshot(t, evs[3], get)
	require.Contains(t, string(evs[3].Data.Backfill), `"queued":0`)

	e.Report(runs[1], "canceled")
	e.SweepOnce()
	evs = evOf(e, created.Id)
	require.Equal(t, []string{"backfill.created", "backfill.paused", "backfill.unpaused",
		"backfill.canceling", "backfill.canceled"}, evTypes(evs))
	evRequireSnapshot(t, evs[4], evGetRaw(e, created.Id))
	for i := 1; i < len(evs); i++ {
		require.Greater(t, evs[i].ID, evs[i-1].ID)
	}
}

// A cancel that finishes at once passes through canceling inside its transaction, a state
// no reader could see: it writes backfill.canceled alone, with GET's answer as snapshot.
func TestEventCancelAtOnceWritesOnlyCanceled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("now", day(1, 1), day(1, 3))
	e.ActionOK(b.Id, "cancel")
	evs := evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created", "backfill.canceled"}, evTypes(evs))
	evRequireSnapshot(t, evs[1], evGetRaw(e, b.Id))
}

// For every path that changes a backfill's state, a failure injected after the change (the
// insert of its event raises, at commit) rolls back the change and the event together; with
// the failure lifted, the same call makes both. Paths: create, all-skipped create, pause,
// unpause, cancel (canceling; canceled at once), sweep finalize (succeeded, failed,
// canceled).
func TestEventCommitsWithItsChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("create", func(t *testing.T) {
		e.PutDag("c1", "@daily", "")
		lift := evInjectFailure(t, e.DB, "backfill.created")
		res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("c1", day(1, 1), day(1, 3)))
		require.Equal(t, http.StatusInternalServerError, res.Status, "body: %s", res.Body)
		require.Zero(t, e.Count(`SELECT count(*) FROM backfills WHERE dag_id = 'c1'`), "the backfill was rolled back with its event")
		require.Zero(t, e.Count(`SELECT count(*) FROM dag_runs WHERE dag_id = 'c1'`))
		require.Empty(t, evList(e, "type=backfill.created").Events)
		lift()
		b := e.CreateBackfill(backfillBody("c1", day(1, 1), day(1, 3)))
		require.Equal(t, map[string]int{"backfill.created": 1}, evDBCounts(t, e.DB, b.Id))
	})

	t.Run("all skipped create is born succeeded", func(t *testing.T) {
		e.PutDag("c2", "@daily", "")
		for d := 1; d <= 3; d++ {
			e.CreateManualRun("c2", day(1, d), nil)
		}
		lift := evInjectFailure(t, e.DB, "backfill.succeeded")
		res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("c2", day(1, 1), day(1, 3)))
		require.Equal(t, http.StatusInternalServerError, res.Status, "body: %s", res.Body)
		require.Zero(t, e.Count(`SELECT count(*) FROM backfills WHERE dag_id = 'c2'`))
		require.Zero(t, e.Count(`SELECT count(*) FROM events WHERE dag_id = 'c2'`), "the created event went with the failed succeeded one")
		lift()
		b := e.CreateBackfill(backfillBody("c2", day(1, 1), day(1, 3)))
		require.Equal(t, "succeeded", string(b.State))
		evs := evOf(e, b.Id)
		require.Equal(t, []string{"backfill.created", "backfill.succeeded"}, evTypes(evs))
		// Nobody ever saw it running: both events carry the final row.
		evRequireSnapshot(t, evs[0], evGetRaw(e, b.Id))
		evRequireSnapshot(t, evs[1], evGetRaw(e, b.Id))
	})

	t.Run("pause and unpause", func(t *testing.T) {
		b := e.DailyBackfill("c3", day(1, 1), day(1, 3))
		evActionRollsBackWithEvent(t, e, b.Id, "pause", "backfill.paused", "running", 1)
		evActionRollsBackWithEvent(t, e, b.Id, "unpause", "backfill.unpaused", "paused", 2)
		require.Equal(t, map[string]int{"backfill.created": 1, "backfill.paused": 1, "backfill.unpaused": 1},
			evDBCounts(t, e.DB, b.Id))
	})

	t.Run("cancel to canceling, then the sweep to canceled", func(t *testing.T) {
		b := e.DailyBackfill("c4", day(1, 1), day(1, 3))
		run := e.ClaimWithN(1, map[string]any{"worker_id": "w", "dag_id": "c4", "limit": 1})
		lift := evInjectFailure(t, e.DB, "backfill.canceling")
		require.Equal(t, http.StatusInternalServerError, e.Action(b.Id, "cancel").Status)
		evRequireUnchanged(t, e, b.Id, "running", 1)
		require.EqualValues(t, 2, e.GetBackfill(b.Id).Progress.Queued, "the queued runs' cancel rolled back too")
		lift()
		e.ActionOK(b.Id, "cancel")
		e.Report(run[0], "success")
		evSweepRollsBackWithEvent(t, e, b.Id, "backfill.canceled", "canceling", 2)
		require.Equal(t, map[string]int{"backfill.created": 1, "backfill.canceling": 1, "backfill.canceled": 1},
			evDBCounts(t, e.DB, b.Id))
	})

	t.Run("cancel to canceled at once", func(t *testing.T) {
		b := e.DailyBackfill("c5", day(1, 1), day(1, 3))
		require.Equal(t, "canceled", evActionRollsBackWithEvent(t, e, b.Id, "cancel", "backfill.canceled", "running", 1))
		require.Equal(t, map[string]int{"backfill.created": 1, "backfill.canceled": 1},
			evDBCounts(t, e.DB, b.Id))
	})

	for _, tc := range []struct{ outcome, state string }{{"success", "succeeded"}, {"failed", "failed"}} {
		t.Run("sweep finalize "+tc.state, func(t *testing.T) {
			dag := "c6" + tc.state
			b := e.DailyBackfill(dag, day(1, 1), day(1, 2))
			runs := e.ClaimWithN(2, map[string]any{"worker_id": "w", "dag_id": dag, "limit": 2})
			e.Report(runs[0], "success")
			e.Report(runs[1], tc.outcome)
			evSweepRollsBackWithEvent(t, e, b.Id, "backfill."+tc.state, "running", 1)
			evs := evOf(e, b.Id)
			require.Equal(t, []string{"backfill.created", "backfill." + tc.state}, evTypes(evs))
			evRequireSnapshot(t, evs[1], evGetRaw(e, b.Id))
		})
	}
}

// evRequireUnchanged checks that a call refused for an injected event failure changed
// nothing: the backfill's state is as before and it has no more events than before.
func evRequireUnchanged(t testing.TB, e *env, id int64, state string, events int) {
	t.Helper()
	require.Equal(t, state, string(e.GetBackfill(id).State))
	require.Len(t, evOf(e, id), events)
}

// evActionRollsBackWithEvent checks that action on backfill id answers 500 and changes
// nothing while its event eventType cannot be written (the state stays state, the backfill
// keeps its events events); then, the failure lifted, it repeats the action and answers the
// backfill's state after it.
func evActionRollsBackWithEvent(t testing.TB, e *env, id int64, action, eventType, state string, events int) string {
	t.Helper()
	lift := evInjectFailure(t, e.DB, eventType)
	require.Equal(t, http.StatusInternalServerError, e.Action(id, action).Status)
	evRequireUnchanged(t, e, id, state, events)
	lift()
	return string(e.ActionOK(id, action).State)
}

// evSweepRollsBackWithEvent is evActionRollsBackWithEvent for a sweep pass that would
// finish backfill id with the event eventType: the pass fails, nothing changes; then, the
// failure lifted, a pass runs.
func evSweepRollsBackWithEvent(t testing.TB, e *env, id int64, eventType, state string, events int) {
	t.Helper()
	lift := evInjectFailure(t, e.DB, eventType)
	require.Error(t, e.Sweep.RunOnce(t.Context()))
	evRequireUnchanged(t, e, id, state, events)
	lift()
	e.SweepOnce()
}

// GET /events filters by backfill and type, pages with next_after, and GET
// /backfills/{id}/events answers the same events as JSON (404 for an unknown backfill).
func TestEventListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b1 := e.DailyBackfill("l1", day(1, 1), day(1, 3))
	b2 := e.DailyBackfill("l2", day(1, 1), day(1, 3))
	e.ActionOK(b1.Id, "pause")
	e.ActionOK(b2.Id, "cancel")

	var all []evEvent
	after := int64(0)
	for {
		p := evList(e, fmt.Sprintf("after=%d&limit=2", after))
		if len(p.Events) == 0 {
			require.Equal(t, after, p.NextAfter, "an empty page keeps the cursor")
			break
		}
		require.Equal(t, p.Events[len(p.Events)-1].ID, p.NextAfter)
		all = append(all, p.Events...)
		after = p.NextAfter
	}
	require.Equal(t, []string{"backfill.created", "backfill.created", "backfill.paused",
		"backfill.canceled"}, evTypes(all))

	paused := evList(e, "type=backfill.paused")
	require.Len(t, paused.Events, 1)
	require.Equal(t, b1.Id, paused.Events[0].BackfillID)
	require.Len(t, evList(e, fmt.Sprintf("backfill_id=%d", b2.Id)).Events, 2)

	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events", b1.Id), nil)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var own evPage
	res.Decode(t, &own)
	require.Equal(t, []string{"backfill.created", "backfill.paused"}, evTypes(own.Events))
	res = e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events?after=%d", b1.Id, own.Events[0].ID), nil)
	res.Decode(t, &own)
	require.Equal(t, []string{"backfill.paused"}, evTypes(own.Events))

	// The webhook fan-out counts the events it takes (one replica's, once each): the replica
	// has no deliverer running here, so the test runs its fan-out.
	require.NoError(t, e.Store.WebhookFanOut(context.Background()))
	metricsRes, err := e.do(http.MethodGet, "/metrics", nil)
	require.NoError(t, err)
	require.Contains(t, string(metricsRes.Body), `backfill_events_written_total{type="backfill.created"} 2`)
	require.Contains(t, string(metricsRes.Body), `backfill_events_written_total{type="backfill.canceled"} 1`)

	requireProblem(t, e.Do(http.MethodGet, "/api/v1/backfills/999999/events", nil), http.StatusNotFound, "backfill_not_found")
	requireProblem(t, e.Do(http.MethodGet, "/api/v1/events?type=backfill.exploded", nil), http.StatusBadRequest, "invalid_request")
	requireProblem(t, e.Do(http.MethodGet, "/api/v1/events?after=-1", nil), http.StatusBadRequest, "invalid_request")
}

// The sweep drops the outbox's partitions whose events are all older than the retention (7
// days) and keeps younger ones: retention removes whole partitions, never rows.
func TestEventRetentionPrunedBySweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := e.DailyBackfill("r1", day(1, 1), day(1, 2))
	e.ActionOK(old.Id, "cancel")
	pgtest.CutEventPartition(t, e.DB) // the old events' partition ends here
	// The sweep sees it closed once the transactions that could write into it ended.
	require.Eventually(t, func() bool {
		e.SweepOnce()
		var open bool
		require.NoError(t, e.DB.Get(&open, `SELECT EXISTS (SELECT 1 FROM outbox_partitions WHERE closed_at IS NULL AND hi <= $1)`,
			evOf(e, old.Id)[1].ID+1))
		return !open
	}, 10*time.Second, 20*time.Millisecond, "the old events' partition closes")
	e.Clock.Advance(6 * 24 * time.Hour)
	young := e.DailyBackfill("r2", day(1, 1), day(1, 2))
	e.SweepOnce()
	require.Len(t, evOf(e, old.Id), 2, "6 days old: kept")
	var oldPartition string
	require.NoError(t, e.DB.Get(&oldPartition, `SELECT tableoid::regclass::text FROM outbox WHERE id = $1`, evOf(e, old.Id)[0].ID))
	e.Clock.Advance(24*time.Hour + time.Second)
	e.SweepOnce()
	require.Empty(t, evOf(e, old.Id), "older than 7 days: pruned")
	require.Len(t, evOf(e, young.Id), 1)
	var gone bool
	require.NoError(t, e.DB.Get(&gone, `SELECT to_regclass($1) IS NULL`, oldPartition))
	require.True(t, gone, "the partition %s is dropped whole, no row deleted", oldPartition)
}

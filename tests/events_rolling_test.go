package tests

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// During a rolling deploy of migrations/00037 the replicas of the previous version (commit
// 025191d) run their SQL against the new schema: events is a view over the partitioned outbox
// with the columns they read, an INSTEAD OF INSERT trigger stores the fat rows they write,
// DELETE goes through the view, and event_data/backfill_events/events_scan keep their
// signatures. The statements below are theirs, copied as they were sent (the Go that built
// them expanded: backfillColumns, activeStatesSQL, StatementLockWait, eventKeyColumnsOf,
// pageBoundCTE); the tests run them next to the new code on one database.

// previousPatchSQL is the previous version's PATCH (repo/backfill_patch.go at 025191d): the
// change and its event in one statement, the event a fat row with the backfill's whole row
// (RETURNING backfills AS snapshot). $1 id, $2 max_active_runs, $3/$4 set/max_failed_runs,
// $5/$6 set/description, $7/$8 set/pool, $9 lock_timeout (ms), $10 priority.
const previousPatchSQL = `
	WITH patched AS (
		UPDATE backfills SET
			max_active_runs = coalesce($2, max_active_runs),
			max_failed_runs = CASE WHEN $3 THEN $4 ELSE max_failed_runs END,
			description = CASE WHEN $5 THEN $6 ELSE description END,
			pool = CASE WHEN $7 THEN $8::text ELSE pool END,
			priority = coalesce($10::smallint, priority),
			settings_revision = settings_revision + 1,
			updated_at = backfill_change_time(updated_at)
		WHERE id = $1 AND state IN ('running', 'paused', 'canceling')
			AND (coalesce($2, max_active_runs) IS DISTINCT FROM max_active_runs
				OR (CASE WHEN $3 THEN $4 ELSE max_failed_runs END) IS DISTINCT FROM max_failed_runs
				OR (CASE WHEN $5 THEN $6 ELSE description END) IS DISTINCT FROM description
				OR (CASE WHEN $7 THEN $8::text ELSE pool END) IS DISTINCT FROM pool
				OR coalesce($10::smallint, priority) IS DISTINCT FROM priority)
			AND set_config('lock_timeout', $9, true) IS NOT NULL
		RETURNING backfills AS snapshot, id, dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
	max_active_runs, description, state, created_at, updated_at, completed_at,
	num_queued, num_running, num_success, num_failed, num_canceled, num_skipped,
	max_failed_runs, pause_reason, plan_hash, parent_backfill_id, pool, code_ref, created_by, reason, priority,
	num_blocked, group_id),
	event AS (
		INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
		SELECT pg_current_xact_id()::text::bigint << 12,
			'backfill.updated', p.id, p.dag_id, p.updated_at, p.snapshot
		FROM patched p)
	SELECT id, dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
	max_active_runs, description, state, created_at, updated_at, completed_at,
	num_queued, num_running, num_success, num_failed, num_canceled, num_skipped,
	max_failed_runs, pause_reason, plan_hash, parent_backfill_id, pool, code_ref, created_by, reason, priority,
	num_blocked, group_id FROM patched`

// previousEventPageSQL is the previous version's page of GET /events (repo/event.go at
// 025191d, eventPageSQL): $1 after, $2 type (NULL: all), $3 limit, $4 the backfills whose
// data is rendered (NULL: all); each event with the page's horizon.
const previousEventPageSQL = `
	WITH snap AS (SELECT pg_current_snapshot() AS s),
	page AS (
		SELECT events.id, events.type, coalesce(events.backfill_id, 0) AS backfill_id, coalesce(events.dag_id, '') AS dag_id, coalesce(events.group_id, (events.snapshot).group_id) AS group_id, events.occurred_at,
			CASE WHEN $4::bigint[] IS NULL OR backfill_id = ANY ($4) THEN event_data(events) END AS rendered
		FROM events WHERE id > $1 AND ($2::text IS NULL OR type = $2) ORDER BY id LIMIT $3),
	bound AS MATERIALIZED (
			SELECT CASE
				WHEN coalesce((SELECT max(id) FROM page) < (pg_snapshot_xmin(snap.s)::text::bigint << 12), true)
				THEN pg_snapshot_xmin(snap.s)::text::bigint << 12
				ELSE event_horizon(snap.s) END AS horizon
			FROM snap)
	SELECT page.*, bound.horizon
	FROM page, bound
	ORDER BY page.id`

// previousBackfillEventPageSQL is the previous version's page of one backfill's events
// (repo/event.go at 025191d, backfillEventPageSQL): previousEventPageSQL's parameters and $5
// the backfill, read through backfill_events.
const previousBackfillEventPageSQL = `
	WITH snap AS (SELECT pg_current_snapshot() AS s),
	page AS (
		SELECT events.id, events.type, coalesce(events.backfill_id, 0) AS backfill_id, coalesce(events.dag_id, '') AS dag_id, coalesce(events.group_id, (events.snapshot).group_id) AS group_id, events.occurred_at,
			CASE WHEN $4::bigint[] IS NULL OR backfill_id = ANY ($4) THEN event_data(events) END AS rendered
		FROM backfill_events($5, $1, CASE WHEN $2::text IS NULL THEN NULL ELSE ARRAY[$2::text] END, $3) AS events),
	bound AS MATERIALIZED (
			SELECT CASE
				WHEN coalesce((SELECT max(id) FROM page) < (pg_snapshot_xmin(snap.s)::text::bigint << 12), true)
				THEN pg_snapshot_xmin(snap.s)::text::bigint << 12
				ELSE event_horizon(snap.s) END AS horizon
			FROM snap)
	SELECT page.*, bound.horizon
	FROM page, bound
	ORDER BY page.id`

// previousPruneEventsSQL is the previous version's sweep of expired events (repo/sweep.go at
// 025191d, pruneEventsStatement): $1 the retention in seconds, $2 the batch.
const previousPruneEventsSQL = `DELETE FROM events WHERE id IN (
		SELECT id FROM events ORDER BY id LIMIT $2)
	AND occurred_at < backfill_now() - make_interval(secs => $1)`

// previousPatch runs the previous version's PATCH of max_active_runs and the description as a
// replica of it sends it: one statement, its own transaction.
func previousPatch(t testing.TB, db *sqlx.DB, id int64, maxActiveRuns int, description *string) {
	t.Helper()
	rows, err := db.Queryx(previousPatchSQL, id, maxActiveRuns, false, nil, description != nil, description,
		false, nil, "2000", nil)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		row := map[string]any{}
		require.NoError(t, rows.MapScan(row))
		require.EqualValues(t, id, row["id"])
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, n, "the previous PATCH changed the backfill")
}

// previousPageRow is a row of the previous version's page statements.
type previousPageRow struct {
	ID         int64     `db:"id"`
	Type       string    `db:"type"`
	BackfillID int64     `db:"backfill_id"`
	DagID      string    `db:"dag_id"`
	GroupID    *int64    `db:"group_id"`
	OccurredAt time.Time `db:"occurred_at"`
	Rendered   []byte    `db:"rendered"`
	Horizon    int64     `db:"horizon"`
}

// previousPage reads a page with one of the previous version's statements, again while the
// page reaches past the horizon (as its EventPage did), and answers the events below it.
func previousPage(t testing.TB, db *sqlx.DB, stmt string, args ...any) []previousPageRow {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rows []previousPageRow
		require.NoError(t, db.Select(&rows, stmt, args...))
		held := false
		for i, r := range rows {
			if r.ID >= r.Horizon {
				rows, held = rows[:i], true
				break
			}
		}
		if !held || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// servedData reads the events as the new code serves them, data kept as raw JSON, by id.
func servedData(t testing.TB, e *env, query string) map[int64]json.RawMessage {
	t.Helper()
	var page struct {
		Events []struct {
			ID   int64           `json:"id"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	res := e.Do(http.MethodGet, "/api/v1/events?"+query, nil)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	res.Decode(t, &page)
	out := map[int64]json.RawMessage{}
	for _, ev := range page.Events {
		out[ev.ID] = ev.Data
	}
	return out
}

// requireSameJSON requires two JSON documents to be the same value (numbers by their digits).
func requireSameJSON(t testing.TB, want, got []byte, msg ...any) {
	t.Helper()
	require.Equal(t, evExact(t, want), evExact(t, got), msg...)
}

// A previous replica's PATCH, a fat row through the view's INSTEAD OF INSERT trigger, is read
// by the new code (GET /events, GET /backfills/{id}/events, the filter by type) as
// backfill.updated with GET's answer right after it as data.backfill, between the new code's
// thin events, in order.
func TestRollingPreviousReplicasPatchIsReadByTheNewCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("roll", day(1, 1), day(1, 4), "description", "set by a new replica", "max_active_runs", 2)
	gets := [][]byte{evGetRaw(e, b.Id)}
	e.Clock.Advance(time.Second)
	previousPatch(t, e.DB, b.Id, 3, nil)
	gets = append(gets, evGetRaw(e, b.Id))
	e.Clock.Advance(time.Second)
	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 4})
	gets = append(gets, evGetRaw(e, b.Id))

	// Stored as it came: a fat row with its type by name and the backfill's row.
	var stored []struct {
		Type     *string `db:"type"`
		Kind     *int    `db:"kind"`
		Snapshot bool    `db:"snapshot"`
		DagID    *string `db:"dag_id"`
	}
	require.NoError(t, e.DB.Select(&stored, `SELECT type, kind, (snapshot).id IS NOT NULL AS snapshot, dag_id
		FROM outbox WHERE backfill_id = $1 ORDER BY id`, b.Id))
	require.Len(t, stored, 3)
	require.Equal(t, "backfill.updated", *stored[1].Type)
	require.Nil(t, stored[1].Kind)
	require.True(t, stored[1].Snapshot)
	require.Equal(t, "roll", *stored[1].DagID)
	require.Nil(t, stored[0].Type, "the new code's events are thin")
	require.False(t, stored[2].Snapshot)

	all := []string{"backfill.created", "backfill.updated", "backfill.updated"}
	for _, tc := range []struct {
		name  string
		evs   []evEvent
		types []string
		gets  [][]byte
	}{
		{"GET /events?backfill_id", evOf(e, b.Id), all, gets},
		{"GET /backfills/{id}/events", ownEventsOf(e, b.Id), all, gets},
		{"GET /events?dag_id", evList(e, "dag_id=roll&limit=1000").Events, all, gets},
		{"GET /events", evList(e, "limit=1000").Events, all, gets},
		{"GET /events?type", evList(e, "type=backfill.updated&limit=1000").Events, all[1:], gets[1:]},
	} {
		require.Equal(t, tc.types, evTypes(tc.evs), tc.name)
		for i, ev := range tc.evs {
			require.Equal(t, b.Id, ev.BackfillID, tc.name)
			require.Equal(t, "roll", ev.DagID, tc.name)
			evRequireSnapshot(t, ev, tc.gets[i])
		}
	}
}

// After a previous replica's PATCH changed the description (its fat row carries it; it writes
// no row of backfill_descriptions), the new code's later thin events must still render the
// description in force, the one that PATCH set: data.backfill is GET's answer right after
// each change.
func TestRollingThinEventsAfterAPreviousReplicasDescriptionChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("rolld", day(1, 1), day(1, 4), "description", "A")
	gets := [][]byte{evGetRaw(e, b.Id)}
	e.Clock.Advance(time.Second)
	described := "B, by a previous replica"
	previousPatch(t, e.DB, b.Id, 3, &described)
	gets = append(gets, evGetRaw(e, b.Id))
	e.Clock.Advance(time.Second)
	e.ActionOK(b.Id, "pause") // a new replica's thin event
	gets = append(gets, evGetRaw(e, b.Id))
	e.Clock.Advance(time.Second)
	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 4})
	gets = append(gets, evGetRaw(e, b.Id))

	evs := evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created", "backfill.updated", "backfill.paused", "backfill.updated"}, evTypes(evs))
	for i, ev := range evs {
		require.JSONEq(t, []string{`"A"`, `"B, by a previous replica"`, `"B, by a previous replica"`,
			`"B, by a previous replica"`}[i], string(snapshotField(t, ev, "description")), "event %d %s", i, ev.Type)
		evRequireSnapshot(t, ev, gets[i])
	}
}

// The previous version's page statements read the new code's thin events (a group member's
// and a plain backfill's, and a group's own) with the right type, dag_id, group_id and data:
// the document the new code serves for the same event, GET's answer right after the change.
func TestRollingPreviousPageReadsThinEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plain := e.DailyBackfill("rollp", day(1, 1), day(1, 3), "description", "plain")
	plainGets := [][]byte{evGetRaw(e, plain.Id)}
	e.PutDag("rollg", "@daily", "")
	g := e.CreateGroup([]string{"rollg"}, day(1, 1), day(1, 3), "description", "grouped")
	member := g.Members[0].BackfillId
	memberGets := [][]byte{evGetRaw(e, member)}
	e.Clock.Advance(time.Second)
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "pause").Status)
	memberGets = append(memberGets, evGetRaw(e, member))
	e.PatchBackfill(plain.Id, map[string]any{"description": "plain, changed"})
	plainGets = append(plainGets, evGetRaw(e, plain.Id))
	e.Clock.Advance(time.Second)
	e.ActionOK(plain.Id, "pause")
	plainGets = append(plainGets, evGetRaw(e, plain.Id))

	served := servedData(t, e, "limit=1000")
	rows := previousPage(t, e.DB, previousEventPageSQL, 0, nil, 1000, nil)
	require.Len(t, rows, len(served), "the previous page reads every event the new code serves")
	byBackfill := map[int64][]previousPageRow{}
	groupEvents := 0
	for _, r := range rows {
		require.Contains(t, served, r.ID)
		requireSameJSON(t, served[r.ID], r.Rendered, "event %d %s: the previous page renders what the new code serves", r.ID, r.Type)
		if r.BackfillID == 0 {
			groupEvents++
			require.Contains(t, []string{"backfill_group.created", "backfill_group.paused"}, r.Type)
			require.Empty(t, r.DagID)
			require.NotNil(t, r.GroupID)
			require.Equal(t, g.Id, *r.GroupID)
			continue
		}
		byBackfill[r.BackfillID] = append(byBackfill[r.BackfillID], r)
	}
	require.Equal(t, 2, groupEvents)

	check := func(name string, rows []previousPageRow, id int64, dag string, group *int64, types []string, gets [][]byte) {
		t.Helper()
		require.Len(t, rows, len(types), name)
		for i, r := range rows {
			require.Equal(t, types[i], r.Type, name)
			require.Equal(t, id, r.BackfillID, name)
			require.Equal(t, dag, r.DagID, name)
			if group == nil {
				require.Nil(t, r.GroupID, name)
			} else {
				require.NotNil(t, r.GroupID, name)
				require.Equal(t, *group, *r.GroupID, name)
			}
			ev := evEvent{ID: r.ID, Type: r.Type}
			require.NoError(t, json.Unmarshal(r.Rendered, &ev.Data), "%s: %s", name, r.Rendered)
			evRequireSnapshot(t, ev, gets[i])
			if r.Type == "backfill.paused" {
				require.NotNil(t, ev.Data.Reason, name)
				require.Equal(t, "user", *ev.Data.Reason, name)
			}
		}
	}
	plainTypes := []string{"backfill.created", "backfill.updated", "backfill.paused"}
	memberTypes := []string{"backfill.created", "backfill.paused"}
	check("previous page, plain", byBackfill[plain.Id], plain.Id, "rollp", nil, plainTypes, plainGets)
	check("previous page, member", byBackfill[member], member, "rollg", &g.Id, memberTypes, memberGets)

	check("previous backfill page, plain",
		previousPage(t, e.DB, previousBackfillEventPageSQL, 0, nil, 1000, nil, plain.Id),
		plain.Id, "rollp", nil, plainTypes, plainGets)
	check("previous backfill page, member",
		previousPage(t, e.DB, previousBackfillEventPageSQL, 0, nil, 1000, nil, member),
		member, "rollg", &g.Id, memberTypes, memberGets)

	// Its filters: by type, and data rendered only for the backfills asked for.
	paused := previousPage(t, e.DB, previousEventPageSQL, 0, "backfill.paused", 1000, nil)
	require.Len(t, paused, 2)
	for _, r := range paused {
		require.Equal(t, "backfill.paused", r.Type)
	}
	only := previousPage(t, e.DB, previousEventPageSQL, 0, nil, 1000, pq.Int64Array{plain.Id})
	for _, r := range only {
		require.Equal(t, r.BackfillID == plain.Id, r.Rendered != nil, "event %d", r.ID)
	}
	after := byBackfill[plain.Id][0].ID
	own := previousPage(t, e.DB, previousBackfillEventPageSQL, after, "backfill.paused", 1000, nil, plain.Id)
	require.Len(t, own, 1)
	require.Equal(t, "backfill.paused", own[0].Type)
}

// The previous version's sweep of expired events (a DELETE through the view) runs against the
// partitioned outbox without error while the new sweep keeps the partitions: it deletes the
// events past retention, thin and fat alike, with their webhook deliveries (the foreign key's
// cascade), and the new code reads what is left.
func TestRollingPreviousPruneRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("rollx", day(1, 1), day(1, 4))
	previousPatch(t, e.DB, b.Id, 3, nil)
	var webhook int64
	require.NoError(t, e.DB.Get(&webhook, `
		INSERT INTO webhooks (url, event_types, secret, created_at, first_event)
		VALUES ('https://example.com/hook', ARRAY['backfill.created', 'backfill.updated'], 'whsec_x', now(), 0)
		RETURNING id`))
	e.DB.MustExec(`INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
		SELECT $1, id, now(), now() FROM outbox`, webhook)

	const retention = 7 * 24 * time.Hour
	prune := func() int64 {
		t.Helper()
		res, err := e.DB.Exec(previousPruneEventsSQL, retention.Seconds(), 100)
		require.NoError(t, err, "the previous prune")
		n, err := res.RowsAffected()
		require.NoError(t, err)
		return n
	}
	require.Zero(t, prune(), "nothing is past retention yet")

	e.Clock.Advance(retention + time.Hour)
	e.ActionOK(b.Id, "pause") // a new event, not past retention
	require.EqualValues(t, 2, prune(), "the created (thin) and updated (fat) events past retention")
	require.Zero(t, prune())
	require.Zero(t, e.Count(`SELECT count(*) FROM webhook_deliveries`), "their deliveries went with them")

	evs := evOf(e, b.Id)
	require.Equal(t, []string{"backfill.paused"}, evTypes(evs))
	evRequireSnapshot(t, evs[0], evGetRaw(e, b.Id))
	// And the new sweep passes after it.
	e.SweepOnce()
	require.Equal(t, evs, evOf(e, b.Id))
}

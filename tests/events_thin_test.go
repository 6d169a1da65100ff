package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Events are stored thin (migrations/00037): what a change can change, the rest of the
// document rendered when the event is read, from the backfill's row (or the copy kept of a
// deleted one) and the description in force at the event's time (backfill_descriptions).
// These tests read events after later changes and require each document to be still what GET
// answered right after its own change: a later change, a deletion, a group must not leak into
// an earlier event's rendering.

// thinEvent is an event as served with its group_id (evEvent's fields and data as raw JSON).
type thinEvent struct {
	evEvent
	GroupID *int64 `json:"group_id"`
}

// thinEventsOf reads every event of one backfill through GET /events?backfill_id=, with
// group_id.
func thinEventsOf(e *env, backfillID int64) []thinEvent {
	e.t.Helper()
	var page struct {
		Events []thinEvent `json:"events"`
	}
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/events?backfill_id=%d&limit=1000", backfillID), nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	res.Decode(e.t, &page)
	return page.Events
}

// ownEventsOf reads GET /backfills/{id}/events (one page).
func ownEventsOf(e *env, backfillID int64) []evEvent {
	e.t.Helper()
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/events?limit=1000", backfillID), nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var page evPage
	res.Decode(e.t, &page)
	return page.Events
}

// snapshotField reads one field of an event's data.backfill as JSON (null when absent).
func snapshotField(t testing.TB, ev evEvent, field string) json.RawMessage {
	t.Helper()
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(ev.Data.Backfill, &doc), "event %d: %s", ev.ID, ev.Data.Backfill)
	if v, ok := doc[field]; ok {
		return v
	}
	return json.RawMessage("null")
}

// changeLog records GET's answer right after each change of a backfill.
type changeLog struct {
	e    *env
	id   int64
	gets [][]byte
}

// after runs change and records GET's answer right after it.
func (c *changeLog) after(change func()) {
	c.e.t.Helper()
	change()
	c.gets = append(c.gets, evGetRaw(c.e, c.id))
}

// requireEvents requires the events to be one a change, in order, each with the given type
// and GET's answer right after its change as data.backfill.
func (c *changeLog) requireEvents(t testing.TB, evs []evEvent, types []string) {
	t.Helper()
	require.Equal(t, types, evTypes(evs))
	require.Len(t, c.gets, len(evs), "one event a change")
	for i, ev := range evs {
		evRequireSnapshot(t, ev, c.gets[i])
	}
}

// A description set at creation, changed by PATCH A → B → cleared → C, with pauses, unpauses
// and other settings' changes between (some at the same instant of the clock as the change
// before them): every event renders the description in force at its own change, and its
// whole data.backfill is GET's answer right after that change, read after every later
// change. GET /events and GET /backfills/{id}/events agree.
func TestThinEventsRenderTheDescriptionInForceAtTheirChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("thin", day(1, 1), day(1, 4), "description", "A", "max_active_runs", 2)
	log := &changeLog{e: e, id: b.Id, gets: [][]byte{evGetRaw(e, b.Id)}}
	patch := func(body map[string]any) func() {
		return func() { e.PatchBackfill(b.Id, body) }
	}
	action := func(a string) func() {
		return func() { e.ActionOK(b.Id, a) }
	}

	e.Clock.Advance(time.Second)
	log.after(patch(map[string]any{"description": "B"}))
	log.after(action("pause")) // the same instant: the change time moves a microsecond on
	e.Clock.Advance(1500 * time.Millisecond)
	log.after(patch(map[string]any{"max_active_runs": 3})) // the description stays B
	log.after(action("unpause"))
	e.Clock.Advance(time.Second)
	log.after(patch(map[string]any{"description": nil})) // cleared
	log.after(action("pause"))
	e.Clock.Advance(250 * time.Millisecond)
	log.after(patch(map[string]any{"description": "C", "max_active_runs": 4}))
	log.after(patch(map[string]any{"max_failed_runs": 5}))
	log.after(action("unpause"))
	e.Clock.Advance(time.Second)
	log.after(action("cancel")) // nothing running: canceled at once

	types := []string{"backfill.created", "backfill.updated", "backfill.paused", "backfill.updated",
		"backfill.unpaused", "backfill.updated", "backfill.paused", "backfill.updated", "backfill.updated",
		"backfill.unpaused", "backfill.canceled"}
	descriptions := []string{`"A"`, `"B"`, `"B"`, `"B"`, `"B"`, `null`, `null`, `"C"`, `"C"`, `"C"`, `"C"`}
	evs := evOf(e, b.Id)
	log.requireEvents(t, evs, types)
	for i, ev := range evs {
		require.JSONEq(t, descriptions[i], string(snapshotField(t, ev, "description")), "event %d %s", i, ev.Type)
		require.Equal(t, b.Id, ev.BackfillID)
		require.Equal(t, "thin", ev.DagID)
	}
	log.requireEvents(t, ownEventsOf(e, b.Id), types)
	// A reader of every event renders them the same way.
	var all []evEvent
	for _, ev := range evList(e, "limit=1000").Events {
		if ev.BackfillID == b.Id {
			all = append(all, ev)
		}
	}
	log.requireEvents(t, all, types)

	// Each description change was kept once, from its change's time.
	require.Equal(t, 4, e.Count(`SELECT count(*) FROM backfill_descriptions WHERE backfill_id = $1`, b.Id))
}

// A backfill deleted with its DAG (DELETE /dags/{id}): its events are still read, by
// backfill_id and by dag_id, with their whole documents (dag_id, plan_hash, description, the
// settings of their time) rendered from the copy of its row kept at the deletion, while GET
// answers 404.
func TestThinEventsOfABackfillDeletedWithItsDag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("gone", day(1, 1), day(1, 4), "description", "first", "max_active_runs", 2)
	require.NotNil(t, b.PlanHash)
	log := &changeLog{e: e, id: b.Id, gets: [][]byte{evGetRaw(e, b.Id)}}
	e.Clock.Advance(time.Second)
	log.after(func() { e.PatchBackfill(b.Id, map[string]any{"description": "second", "max_active_runs": 3}) })
	e.Clock.Advance(time.Second)
	log.after(func() { e.ActionOK(b.Id, "pause") })
	log.after(func() { e.ActionOK(b.Id, "cancel") })
	types := []string{"backfill.created", "backfill.updated", "backfill.paused", "backfill.canceled"}
	log.requireEvents(t, evOf(e, b.Id), types)

	// Another backfill of another DAG, alive, whose events must not mix in.
	other := e.DailyBackfill("stays", day(1, 1), day(1, 2), "description", "other")

	e.Clock.Advance(time.Second)
	res := e.Do(http.MethodDelete, "/api/v1/dags/gone", nil)
	require.Equal(t, http.StatusNoContent, res.Status, "body: %s", res.Body)
	requireProblem(t, e.Do(http.MethodGet, backfillPath(b.Id), nil), http.StatusNotFound, "backfill_not_found")
	require.Zero(t, e.Count(`SELECT count(*) FROM backfills WHERE id = $1`, b.Id))

	evs := evOf(e, b.Id)
	log.requireEvents(t, evs, types)
	for i, ev := range evs {
		require.Equal(t, "gone", ev.DagID)
		require.JSONEq(t, `"gone"`, string(snapshotField(t, ev, "dag_id")))
		require.JSONEq(t, fmt.Sprintf("%q", *b.PlanHash), string(snapshotField(t, ev, "plan_hash")))
		require.JSONEq(t, []string{`"first"`, `"second"`, `"second"`, `"second"`}[i], string(snapshotField(t, ev, "description")))
	}
	byDag := evList(e, "dag_id=gone&limit=1000").Events
	log.requireEvents(t, byDag, types)
	require.Equal(t, []string{"backfill.created"}, evTypes(evOf(e, other.Id)))
	evRequireSnapshot(t, evOf(e, other.Id)[0], evGetRaw(e, other.Id))

	// A DAG of the same name, created again, starts a history of its own.
	fresh := e.DailyBackfill("gone", day(2, 1), day(2, 2))
	require.Equal(t, []string{"backfill.created"}, evTypes(evOf(e, fresh.Id)))
	log.requireEvents(t, evOf(e, b.Id), types)
}

// A group member's events carry group_id, beside the event and in data.backfill, and their
// documents are GET's answers right after each change, whether the change came from the
// group (pause, PATCH of the group's settings, which changes the member's description,
// unpause, cancel) or from the member's own PATCH. The group's own events carry group_id and
// no backfill.
func TestThinEventsOfAGroupMemberCarryTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("gm", "@daily", "")
	g := e.CreateGroup([]string{"gm"}, day(1, 1), day(1, 3), "description", "group's")
	require.Len(t, g.Members, 1)
	id := g.Members[0].BackfillId
	log := &changeLog{e: e, id: id, gets: [][]byte{evGetRaw(e, id)}}
	groupAction := func(a string) func() {
		return func() {
			res := e.GroupAction(g.Id, a)
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		}
	}

	e.Clock.Advance(time.Second)
	log.after(groupAction("pause"))
	e.Clock.Advance(time.Second)
	log.after(func() {
		res := e.Do(http.MethodPatch, groupPath(g.Id), map[string]any{"description": "urgent", "priority": 3})
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	})
	log.after(func() { e.PatchBackfill(id, map[string]any{"max_active_runs": 5}) })
	e.Clock.Advance(time.Second)
	log.after(groupAction("unpause"))
	log.after(groupAction("cancel"))

	evs := thinEventsOf(e, id)
	plain := make([]evEvent, len(evs))
	for i, ev := range evs {
		plain[i] = ev.evEvent
		require.NotNil(t, ev.GroupID, "event %d %s carries its group", i, ev.Type)
		require.Equal(t, g.Id, *ev.GroupID)
		require.JSONEq(t, fmt.Sprint(g.Id), string(snapshotField(t, ev.evEvent, "group_id")))
		require.Equal(t, id, ev.BackfillID)
		require.Equal(t, "gm", ev.DagID)
	}
	log.requireEvents(t, plain, []string{"backfill.created", "backfill.paused", "backfill.updated",
		"backfill.updated", "backfill.unpaused", "backfill.canceled"})
	descriptions := []string{`"group's"`, `"group's"`, `"urgent"`, `"urgent"`, `"urgent"`, `"urgent"`}
	for i, ev := range plain {
		require.JSONEq(t, descriptions[i], string(snapshotField(t, ev, "description")), "event %d %s", i, ev.Type)
	}

	// The group's own events: group_id, no backfill.
	var page struct {
		Events []thinEvent `json:"events"`
	}
	e.Do(http.MethodGet, "/api/v1/events?limit=1000", nil).Decode(t, &page)
	groupEvents := 0
	for _, ev := range page.Events {
		require.NotNil(t, ev.GroupID, "event %d %s", ev.ID, ev.Type)
		require.Equal(t, g.Id, *ev.GroupID)
		if ev.BackfillID == 0 {
			groupEvents++
			require.Empty(t, ev.DagID)
		}
	}
	require.GreaterOrEqual(t, groupEvents, 3, "backfill_group.created, paused, unpaused, canceling/canceled")
}

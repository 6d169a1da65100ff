package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The outbox keeps no CHECK of its rows' shape (migrations/00039): each of its four writers
// builds it. Every writer runs here, and the invariant the CHECKs held, (m) of the test
// invariants, holds over what they wrote; a row of neither a backfill nor a group, written by
// hand, is reported.
func TestOutboxWritersKeepTheRowShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("shape", day(1, 1), day(1, 4))         // backfill.created: the insert trigger
	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 3}) // the PATCH's own statement
	e.ActionOK(b.Id, "pause")                                   // the state trigger
	e.Clock.Advance(time.Second)
	previousPatch(t, e.DB, b.Id, 4, nil) // a previous replica's fat row, through the events view
	for _, d := range []string{"shape_up", "shape_down"} {
		e.PutDag(d, "@daily", "")
	}
	g := e.CreateGroup([]string{"shape_up", "shape_down"}, day(1, 1), day(1, 2))
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "pause").Status) // the group trigger

	require.Equal(t, 3, e.Count(`SELECT count(*) FROM outbox WHERE backfill_id = $1 AND kind IS NOT NULL`, b.Id),
		"created, updated, paused: thin")
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM outbox WHERE backfill_id = $1 AND type IS NOT NULL`, b.Id),
		"the previous replica's row")
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM outbox WHERE group_id = $1`, g.Id), "the group's created and paused")

	clean := &violationRecorder{TB: t}
	checkInvariants(clean, e.DB)
	require.Empty(t, clean.joined())

	_, err := e.DB.Exec(`INSERT INTO outbox (id, kind, occurred_at) VALUES (pg_current_xact_id()::text::bigint << 12, 2, now())`)
	require.NoError(t, err, "no CHECK refuses it any more")
	rec := &violationRecorder{TB: t}
	checkInvariants(rec, e.DB)
	require.Contains(t, rec.joined(), "invariant (m) an event of exactly one backfill or group, with exactly one of kind and type violated")
}

// backfills_events_on_state fires only for statements that set state or num_failed
// (migrations/00039): a column list sees only the statement's SET list, so a BEFORE trigger
// that changed the state for some other column would change it without an event. These are
// the BEFORE UPDATE triggers of backfills, and the one that sets NEW.state does so only when
// num_failed rose. A new one fails this test until its author has checked that list.
func TestStateEventTriggerCoversEveryBeforeTriggerThatChangesState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var before []struct {
		Name string `db:"tgname"`
		Body string `db:"body"`
	}
	require.NoError(t, e.DB.Select(&before, `
		SELECT t.tgname, p.prosrc AS body FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE t.tgrelid = 'backfills'::regclass AND NOT t.tgisinternal
		  AND t.tgtype & 2 <> 0 AND t.tgtype & 16 <> 0 -- BEFORE, UPDATE
		ORDER BY t.tgname`))
	names := []string{}
	for _, tr := range before {
		names = append(names, tr.Name)
		if tr.Name != "backfills_pause_rules" {
			// An assignment, not a comparison: a statement of its own.
			require.NotRegexp(t, `(?im)(^|;|\bTHEN|\bELSE)\s*NEW\.state\s*:?=`, tr.Body, "%s sets the state: add the columns that make it to backfills_events_on_state's UPDATE OF", tr.Name)
		}
	}
	require.Equal(t, []string{"backfills_clocks", "backfills_pause_rules", "backfills_pool_exists_update"}, names,
		"a BEFORE UPDATE trigger of backfills changed: if it can change state, add the columns that make it to backfills_events_on_state's UPDATE OF (migrations/00039)")

	var columns string
	require.NoError(t, e.DB.Get(&columns, `
		SELECT string_agg(a.attname, ',' ORDER BY a.attname) FROM pg_trigger t
		JOIN pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr)
		WHERE t.tgrelid = 'backfills'::regclass AND t.tgname = 'backfills_events_on_state'`))
	require.Equal(t, "num_failed,state", columns)
}

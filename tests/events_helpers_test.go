package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// evEvent is an event as served, its data kept as raw JSON so that snapshots compare as the
// exact bytes' JSON values.
type evEvent struct {
	ID         int64  `json:"id"`
	Type       string `json:"type"`
	BackfillID int64  `json:"backfill_id"`
	DagID      string `json:"dag_id"`
	OccurredAt string `json:"occurred_at"`
	Data       struct {
		Backfill json.RawMessage `json:"backfill"`
		Reason   *string         `json:"reason"`
	} `json:"data"`
}

type evPage struct {
	Events    []evEvent `json:"events"`
	NextAfter int64     `json:"next_after"`
}

// evList reads one page of GET /events (query without the leading '?').
func evList(e *env, query string) evPage {
	e.t.Helper()
	res := e.Do(http.MethodGet, "/api/v1/events?"+query, nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var p evPage
	res.Decode(e.t, &p)
	return p
}

// evOf reads every event of one backfill, in id order.
func evOf(e *env, backfillID int64) []evEvent {
	e.t.Helper()
	var all []evEvent
	after := int64(0)
	for {
		p := evList(e, fmt.Sprintf("backfill_id=%d&after=%d&limit=1000", backfillID, after))
		all = append(all, p.Events...)
		if len(p.Events) < 1000 {
			return all
		}
		after = p.NextAfter
	}
}

// evTypes lists the types of events.
func evTypes(evs []evEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// evGetRaw is GET /backfills/{id}'s body as it is.
func evGetRaw(e *env, id int64) []byte {
	e.t.Helper()
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d", id), nil)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	return res.Body
}

// evRequireSnapshot requires an event's data.backfill to be GET's answer, JSON value for
// JSON value; numbers compare by their digits (json.Number), not as float64.
func evRequireSnapshot(t testing.TB, ev evEvent, get []byte) {
	t.Helper()
	want := evExact(t, get)
	// eta_seconds is GET's reading of the pace now, not a field of the backfill's record.
	if m, ok := want.(map[string]any); ok {
		delete(m, "eta_seconds")
	}
	require.Equal(t, want, evExact(t, ev.Data.Backfill), "event %d %s: data.backfill is not GET's answer", ev.ID, ev.Type)
}

func evExact(t testing.TB, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

// evDBCounts counts the events stored for a backfill, by type.
func evDBCounts(t testing.TB, db *sqlx.DB, backfillID int64) map[string]int {
	t.Helper()
	var rows []struct {
		Type string `db:"type"`
		N    int    `db:"n"`
	}
	require.NoError(t, db.Select(&rows, `SELECT type, count(*) AS n FROM events WHERE backfill_id = $1 GROUP BY type`, backfillID))
	out := map[string]int{}
	for _, r := range rows {
		out[r.Type] = r.N
	}
	return out
}

// evInjectFailure makes the insert of any event of the given type raise, from a trigger on
// the outbox: the failure comes after the change it reports, inside its transaction, at commit.
// It returns the function that lifts it.
func evInjectFailure(t testing.TB, db *sqlx.DB, eventType string) (lift func()) {
	t.Helper()
	db.MustExec(`CREATE TABLE IF NOT EXISTS test_fail_event (type text PRIMARY KEY)`)
	db.MustExec(`
		CREATE OR REPLACE FUNCTION test_fail_event() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM test_fail_event WHERE type = coalesce(NEW.type, event_type_name(NEW.kind))) THEN
				RAISE EXCEPTION 'injected failure after the change behind %', coalesce(NEW.type, event_type_name(NEW.kind));
			END IF;
			RETURN NULL;
		END $$`)
	db.MustExec(`DROP TRIGGER IF EXISTS test_fail_event ON outbox`)
	db.MustExec(`CREATE TRIGGER test_fail_event AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION test_fail_event()`)
	db.MustExec(`INSERT INTO test_fail_event (type) VALUES ($1)`, eventType)
	return func() { db.MustExec(`DELETE FROM test_fail_event WHERE type = $1`, eventType) }
}

package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// evWaitForLockWaiters waits until n sessions wait for the advisory lock (classid, objid).
// It polls the database's own lock table: the condition is the state under test, not a
// duration.
func evWaitForLockWaiters(t *testing.T, e *env, classid, objid int64, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, e.DB.Get(&waiting, `
			SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND NOT granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
			classid, objid))
		return waiting >= n
	}, 30*time.Second, 5*time.Millisecond)
}

// Event writers never wait for each other (migrations/00014_events_without_lock.sql): while
// A's change is held inside its commit, after its event was written, B's change of another
// backfill commits. A reader is served nothing past A's in-flight transaction, not even B's
// committed event, because A's event will have the smaller id; once A commits, both are
// served, A's first.
func TestEventWritersDoNotWaitAndReadersServeNothingPastAnInFlightWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, d := range []string{"oa", "ob", "oc"} {
		e.PutDag(d, "@daily", "")
	}
	a := e.CreateBackfill(backfillBody("oa", day(1, 1), day(1, 3)))
	b := e.CreateBackfill(backfillBody("ob", day(1, 1), day(1, 3)))
	e.CreateBackfill(backfillBody("oc", day(1, 1), day(1, 3)))
	start := evList(e, "").NextAfter

	// A's pause stops inside its commit, after its event was inserted: a test trigger on
	// events waits for an advisory lock that this test holds.
	ctx := context.Background()
	hold, err := e.DB.Conn(ctx)
	require.NoError(t, err)
	defer hold.Close()
	_, err = hold.ExecContext(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)
	e.DB.MustExec(fmt.Sprintf(`
		CREATE FUNCTION test_hold_event() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.backfill_id = %d AND coalesce(NEW.type, event_type_name(NEW.kind)) = 'backfill.paused' THEN
				-- The test decides how long A is held, not LOCK_WAIT, which bounds the
				-- pause's lock waits (repo.statementLockWait).
				PERFORM set_config('lock_timeout', '0', true);
				PERFORM pg_advisory_xact_lock_shared(4242);
			END IF;
			RETURN NULL;
		END $$`, a.Id))
	e.DB.MustExec(`CREATE TRIGGER test_hold_event AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION test_hold_event()`)

	aDone := e.doAsync(http.MethodPut, backfillPath(a.Id)+"/pause", nil)
	evWaitForLockWaiters(t, e, 0, 4242, 1)
	var aXid int64
	require.NoError(t, e.DB.Get(&aXid, `
		SELECT a.backend_xid::text::bigint FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
		WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = 4242 AND NOT l.granted`))

	// B changes another backfill and commits while A is held: no writer waits for another.
	bDone := e.doAsync(http.MethodPut, backfillPath(b.Id)+"/cancel", nil)
	var bRes *response
	select {
	case bRes = <-bDone:
	case <-time.After(20 * time.Second):
		t.Fatal("B's cancel waited for A's commit")
	}
	require.Equal(t, http.StatusOK, bRes.Status, "body: %s", bRes.Body)
	var bCommitted int
	require.NoError(t, e.DB.Get(&bCommitted, `SELECT count(*) FROM events WHERE backfill_id = $1 AND id > $2`, b.Id, start))
	require.Equal(t, 1, bCommitted, "B's event is committed")
	require.Empty(t, evTypes(evList(e, fmt.Sprintf("after=%d", start)).Events),
		"nothing is served past A's in-flight transaction, whose event will have the smaller id")
	require.Empty(t, evTypes(evList(e, fmt.Sprintf("after=%d&backfill_id=%d", start, b.Id)).Events),
		"nor in B's own listing")

	// A transaction that writes no event does not wait either.
	require.Len(t, e.ClaimWith(map[string]any{"worker_id": "w", "dag_id": "oc", "limit": 1}), 1)

	_, err = hold.ExecContext(ctx, `SELECT pg_advisory_unlock(4242)`)
	require.NoError(t, err)
	aRes := <-aDone
	require.Equal(t, http.StatusOK, aRes.Status, "body: %s", aRes.Body)
	evs := evList(e, fmt.Sprintf("after=%d", start)).Events
	// B's cancel found nothing running: it writes backfill.canceled alone.
	require.Equal(t, []string{"backfill.paused", "backfill.canceled"}, evTypes(evs))
	require.Equal(t, a.Id, evs[0].BackfillID)
	require.Equal(t, b.Id, evs[1].BackfillID)
	require.Equal(t, aXid&0xFFFFFFFF, (evs[0].ID>>12)&0xFFFFFFFF, "A's event id is its transaction's id, shifted")
	require.Less(t, evs[0].ID, evs[1].ID)
}

// 16 writers create, pause, unpause and cancel concurrently while a reader pages GET /events
// with after = the last id it saw: it sees every committed event exactly once, in id order,
// none skipped, as the events table says at the end.
func TestEventReaderPagingAfterSeesEveryEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const writers, rounds = 16, 4
	// The writers start at once; the reader pages on this goroutine until they are done.
	writing := startEventWriters(e, "w", writers, rounds, "pause", "unpause", "pause", "cancel")

	var served []int64
	after := int64(0)
	read := func() int {
		res, err := e.do(http.MethodGet, fmt.Sprintf("/api/v1/events?after=%d&limit=7", after), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		var p evPage
		res.Decode(t, &p)
		for _, ev := range p.Events {
			served = append(served, ev.ID)
		}
		after = p.NextAfter
		return len(p.Events)
	}
	for finished := false; !finished; {
		select {
		case err := <-writing:
			require.NoError(t, err)
			finished = true
		default:
			read()
		}
	}
	for read() > 0 {
	}

	var stored []int64
	require.NoError(t, e.DB.Select(&stored, `SELECT id FROM events ORDER BY id`))
	require.Len(t, stored, writers*rounds*5, "created, paused, unpaused, paused, canceled per round")
	require.True(t, slices.IsSorted(served), "served in id order")
	require.Equal(t, stored, served, "every committed event exactly once, none skipped")
}

// startEventWriters creates writers DAGs named prefix00, prefix01, ... and starts one writer
// for each, all at once: rounds times, a daily backfill of three days, then each action on it
// in turn (PUT /backfills/{id}/<action>). It answers the writers' joined error when all end.
func startEventWriters(e *env, prefix string, writers, rounds int, actions ...string) <-chan error {
	for w := range writers {
		e.PutDag(fmt.Sprintf("%s%02d", prefix, w), "@daily", "")
	}
	return startTogether(writers, writers, func(w int) error {
		dag := fmt.Sprintf("%s%02d", prefix, w)
		for r := range rounds {
			b, err := try[api.Backfill](e, http.StatusCreated, http.MethodPost, "/api/v1/backfills", backfillBody(dag, day(1, 1+r*3), day(1, 3+r*3)))
			if err != nil {
				return fmt.Errorf("%s create: %w", dag, err)
			}
			for _, action := range actions {
				if _, err := try[api.Backfill](e, http.StatusOK, http.MethodPut, backfillPath(b.Id)+"/"+action, nil); err != nil {
					return fmt.Errorf("%s %s: %w", dag, action, err)
				}
			}
		}
		return nil
	})
}

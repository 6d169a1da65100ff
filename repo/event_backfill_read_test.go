package repo

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// otherEvents writes n events of a backfill that does not exist, in a transaction of its own.
func otherEvents(t *testing.T, db *sqlx.DB, n int) {
	t.Helper()
	writeEventsOf(t, db, -1, n)
}

// eventRowsRead is how many rows of the outbox's partitions scans have read so far, from the table's
// statistics flushed first: a function's inner scan does not show in EXPLAIN. The caller's db
// has one connection (SetMaxOpenConns(1)), so nothing it did earlier is flushed in between.
func eventRowsRead(t *testing.T, db *sqlx.DB) int64 {
	t.Helper()
	_, err := db.Exec(`SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	var n int64
	require.NoError(t, db.Get(&n, `
		SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_user_tables
		WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'outbox'::regclass)`))
	return n
}

// createBackfill inserts a running backfill of DAG dag, creating the DAG, and answers its id.
func createBackfill(t *testing.T, db *sqlx.DB, dag string) int64 {
	t.Helper()
	_, err := db.Exec(`
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ($1, '@daily', 'UTC', 16, false, now(), now())`, dag)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.Get(&id, `
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at)
		VALUES ($1, '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now()) RETURNING id`, dag))
	return id
}

// eventTypes lists the types of evs in order.
func eventTypes(evs []domain.Event) []domain.EventType {
	var types []domain.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	return types
}

// oneConnectionStore is a Store on a fresh migrated database through a single connection,
// so that eventRowsRead sees only what the reads between its calls did.
func oneConnectionStore(t *testing.T) (*Store, *sqlx.DB) {
	t.Helper()
	db, _ := pgtest.Open(t)
	db.SetMaxOpenConns(1)
	return New(db, Config{}), db
}

// listCounted lists the backfill's events from the start, waiting for any an older
// transaction holds back (the horizon is conservative while a transaction of another database
// ends), and answers them with the rows of events that one more read of the same page
// scanned: a read of EventList's that found events held back reads again.
func listCounted(t *testing.T, s *Store, db *sqlx.DB, backfill int64) ([]domain.EventType, int64) {
	t.Helper()
	ctx := context.Background()
	evs, err := s.EventList(ctx, EventListParams{After: 0, Limit: 100, BackfillID: &backfill, Wait: 10 * time.Second})
	require.NoError(t, err)
	before := eventRowsRead(t, db)
	var page []struct {
		ID      int64  `db:"id"`
		Horizon int64  `db:"horizon"`
		Type    string `db:"type"`
	}
	require.NoError(t, sqlx.SelectContext(ctx, db, &page,
		`SELECT id, horizon, type FROM (`+backfillEventPageSQL+`) AS p`, 0, nil, 100, nil, backfill))
	require.Len(t, page, len(evs))
	return eventTypes(evs), eventRowsRead(t, db) - before
}

// eventsFrom counts the events at or after bound: all a read that starts at bound can scan.
func eventsFrom(t *testing.T, db *sqlx.DB, bound string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM events WHERE id >= (`+bound+`)`, args...))
	return n
}

// A backfill's events are read from its bound: a read of them never scans the events written
// before the backfill was created, however many (a short range after the bound is walked
// along the primary key; a long one is read through the bloom index,
// TestBackfillEventsReadAfterAFloodTouchOnlyPartOfIt).
func TestBackfillEventsAreReadFromTheBackfillsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := oneConnectionStore(t)
	for range 5 { // a transaction writes at most 4,096 events
		otherEvents(t, db, 1000)
	}
	id := createBackfill(t, db, "d")
	for _, n := range []int{2, 3} {
		_, err := s.BackfillPatch(ctx, BackfillPatchParams{ID: id, MaxActiveRuns: &n})
		require.NoError(t, err)
	}
	otherEvents(t, db, 100)

	// The backfill's 3 events and the 100 written after it, none of the 5,000 before, unless
	// a transaction of another database ended while the bound was taken (it is then lower).
	from := eventsFrom(t, db, `SELECT events_from FROM backfills WHERE id = $1`, id)
	types, read := listCounted(t, s, db, id)
	require.Equal(t, []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillUpdated, domain.EventBackfillUpdated}, types)
	// A short range from the bound is counted first (backfill_event_ids chooses the walk by
	// it), then walked, and each event found is read by its id: twice the range at most, and
	// the events.
	require.LessOrEqual(t, read, 2*from+int64(len(types)), "events rows read")
}

// A backfill deleted with its DAG keeps its bound while its events remain, so its events are
// still read from there; a backfill that never existed has none, and a read of its events
// reads no row at all (not the whole outbox). The sweep prunes a deleted backfill's bound
// only past its age.
func TestBackfillEventsOfDeletedAndUnknownBackfills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := oneConnectionStore(t)
	otherEvents(t, db, 1000)
	id := createBackfill(t, db, "d")
	_, err := s.BackfillCancel(ctx, id)
	require.NoError(t, err)
	otherEvents(t, db, 100)
	require.NoError(t, s.DagDelete(ctx, "d"))

	from := eventsFrom(t, db, `SELECT events_from FROM deleted_backfills WHERE id = $1`, id)
	types, read := listCounted(t, s, db, id)
	require.Equal(t, []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillCanceled}, types)
	require.LessOrEqual(t, read, 2*from+int64(len(types)), "events rows read for the deleted backfill")

	types, read = listCounted(t, s, db, id+1000)
	require.Empty(t, types)
	require.Zero(t, read, "events rows read for a backfill that never existed")

	n, err := s.SweepPruneDeletedBackfills(ctx, time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n, "a bound deleted just now is kept")
	n, err = s.SweepPruneDeletedBackfills(ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A transaction that took its id before a backfill was created and changes the backfill in
// a later statement (as READ COMMITTED allows, and a pool's deletion does through its foreign
// key) writes the backfill's event with an id below the creating transaction's: the bound is
// below it too, and the read finds it.
func TestBackfillEventsFromIsBelowEveryEventOfTheBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	s := New(db, Config{})
	early, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer func() { _ = early.Rollback() }()
	var earlyXid int64
	require.NoError(t, early.Get(&earlyXid, `SELECT pg_current_xact_id()::text::bigint`))

	id := createBackfill(t, db, "d")
	_, err = early.Exec(`UPDATE backfills SET state = 'paused', pause_reason = 'user' WHERE id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, early.Commit())

	var pausedID, from int64
	require.NoError(t, db.Get(&pausedID, `SELECT id FROM events WHERE backfill_id = $1 AND type = 'backfill.paused'`, id))
	require.Equal(t, earlyXid, pausedID>>12, "the pause's event carries the early transaction's id")
	require.NoError(t, db.Get(&from, `SELECT events_from FROM backfills WHERE id = $1`, id))
	require.LessOrEqual(t, from, pausedID)

	evs, err := s.EventList(ctx, EventListParams{After: 0, Limit: 100, BackfillID: &id, Wait: 10 * time.Second})
	require.NoError(t, err)
	require.ElementsMatch(t, []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillPaused}, eventTypes(evs))
	stored, err := s.TerminalEventStored(ctx, id, 0)
	require.NoError(t, err)
	require.False(t, stored)
}

package repo

import (
	"context"
	"database/sql"
	"testing"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// otherEvents writes n events of a backfill that does not exist, in a transaction of its own.
func otherEvents(t *testing.T, db *sqlx.DB, n int) {
	t.Helper()
	_, err := db.Exec(`INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		SELECT 'backfill.updated', -1, 'other', now(), '{}' FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
}

// A backfill's events are read from its bound, not through an index by backfill: a read of
// them never scans the events written before the backfill was created, however many.
func TestBackfillEventsAreReadFromTheBackfillsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	db.SetMaxOpenConns(1)
	s := New(db, Config{})
	for range 5 { // a transaction writes at most 4,096 events
		otherEvents(t, db, 1000)
	}
	_, err := db.Exec(`
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('d', '@daily', 'UTC', 16, false, now(), now())`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.Get(&id, `
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at)
		VALUES ('d', '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now()) RETURNING id`))
	for _, n := range []int{2, 3} {
		_, err := s.BackfillPatch(ctx, BackfillPatchParams{ID: id, MaxActiveRuns: &n})
		require.NoError(t, err)
	}
	otherEvents(t, db, 100)

	evs, err := s.EventList(ctx, EventListParams{After: 0, Limit: 100, BackfillID: &id})
	require.NoError(t, err)
	var types []domain.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	require.Equal(t, []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillUpdated, domain.EventBackfillUpdated}, types)

	// Rows read, from the table's statistics flushed before and after: the function's inner
	// scan does not show in EXPLAIN. Every statement of this test runs on the one connection
	// (SetMaxOpenConns above), so nothing it did before is flushed in between.
	rowsRead := func() int64 {
		t.Helper()
		_, err := db.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, db.GetContext(ctx, &n, `
			SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
			WHERE relid = 'events'::regclass`))
		return n
	}
	before := rowsRead()
	var page []struct {
		ID      int64  `db:"id"`
		Horizon int64  `db:"horizon"`
		Type    string `db:"type"`
	}
	require.NoError(t, sqlx.SelectContext(ctx, db, &page,
		`SELECT id, horizon, type FROM (`+backfillEventPageSQL+`) AS p`, 0, nil, 100, nil, id))
	require.Len(t, page, 3)
	read := rowsRead() - before
	// The backfill's 3 events and the 100 written after it; none of the 5,000 before.
	require.LessOrEqual(t, read, int64(3+100), "events rows read")
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
	_, err := db.Exec(`
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('d', '@daily', 'UTC', 16, false, now(), now())`)
	require.NoError(t, err)

	early, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer func() { _ = early.Rollback() }()
	var earlyXid int64
	require.NoError(t, early.Get(&earlyXid, `SELECT pg_current_xact_id()::text::bigint`))

	var id int64
	require.NoError(t, db.Get(&id, `
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at)
		VALUES ('d', '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now()) RETURNING id`))
	_, err = early.Exec(`UPDATE backfills SET state = 'paused', pause_reason = 'user' WHERE id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, early.Commit())

	var pausedID, from int64
	require.NoError(t, db.Get(&pausedID, `SELECT id FROM events WHERE backfill_id = $1 AND type = 'backfill.paused'`, id))
	require.Equal(t, earlyXid, pausedID>>12, "the pause's event carries the early transaction's id")
	require.NoError(t, db.Get(&from, `SELECT events_from FROM backfills WHERE id = $1`, id))
	require.LessOrEqual(t, from, pausedID)

	evs, err := s.EventList(ctx, EventListParams{After: 0, Limit: 100, BackfillID: &id})
	require.NoError(t, err)
	var types []domain.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	require.ElementsMatch(t, []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillPaused}, types)
	stored, err := s.TerminalEventStored(ctx, id, 0)
	require.NoError(t, err)
	require.False(t, stored)
}

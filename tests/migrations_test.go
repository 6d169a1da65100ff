package tests

import (
	"context"
	"database/sql"
	"testing"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/backfillsvc/backfill/migrations"
	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
)

// schemaObjects are what the migrations create: tables, the trigger function, the index
// that arbitrates one active backfill per DAG.
var schemaObjects = []string{
	"public.dags", "public.backfills", "public.dag_runs", "public.backfill_dag_runs", "public.idempotency_keys",
	"public.backfills_one_active_per_dag", "public.dag_runs_unfinished_by_backfill",
}

func requireSchema(t *testing.T, db *sqlx.DB, present bool) {
	t.Helper()
	for _, name := range schemaObjects {
		var reg sql.NullString
		require.NoError(t, db.Get(&reg, `SELECT to_regclass($1)::text`, name))
		require.Equal(t, present, reg.Valid, "%s present", name)
	}
	var fn sql.NullString
	require.NoError(t, db.Get(&fn, `SELECT to_regprocedure('public.dag_runs_count_by_backfill()')::text`))
	require.Equal(t, present, fn.Valid, "trigger function present")
	var triggers int
	require.NoError(t, db.Get(&triggers, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'dag_runs_count_%'`))
	if present {
		require.Equal(t, 1, triggers)
	} else {
		require.Zero(t, triggers)
	}
}

// emptyDatabaseWithMigrations is a new database without a schema, and the migration
// provider for it.
func emptyDatabaseWithMigrations(t *testing.T) (*sqlx.DB, *goose.Provider) {
	t.Helper()
	db, err := sqlx.Open("postgres", pgtest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	p, err := migrations.NewProvider(db.DB)
	require.NoError(t, err)
	return db, p
}

func TestMigrationsUpDownUpOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyDatabaseWithMigrations(t)
	requireSchema(t, db, false)

	current, target, err := p.GetVersions(ctx)
	require.NoError(t, err)
	require.Zero(t, current)
	require.Positive(t, target)
	pending, err := migrations.Pending(ctx, p)
	require.NoError(t, err)
	require.True(t, pending)

	results, err := p.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, results)
	requireSchema(t, db, true)
	pending, err = migrations.Pending(ctx, p)
	require.NoError(t, err)
	require.False(t, pending)
	current, _, err = p.GetVersions(ctx)
	require.NoError(t, err)
	require.Equal(t, target, current)

	// The schema works: creation writes a backfill's counters, the trigger keeps them.
	_, err = db.Exec(`INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('mig', '@daily', 'UTC', 1, false, now(), now())`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.Get(&id, `INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior,
			max_active_runs, state, created_at, updated_at, num_queued)
		VALUES ('mig', '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now(), 1) RETURNING id`))
	_, err = db.Exec(`INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
			run_type, backfill_id, backfill_sort_ordinal, attempt)
		VALUES ('mig', 'backfill__2024-01-01T00:00:00Z', '2024-01-01', '2024-01-01', '2024-01-02', 'queued', 'backfill', $1, 1, 1)`, id)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE dag_runs SET state = 'success' WHERE backfill_id = $1`, id)
	require.NoError(t, err)
	var counts struct {
		Queued  int `db:"num_queued"`
		Success int `db:"num_success"`
	}
	require.NoError(t, db.Get(&counts, `SELECT num_queued, num_success FROM backfills WHERE id = $1`, id))
	require.Equal(t, 0, counts.Queued)
	require.Equal(t, 1, counts.Success)

	// Down to nothing, rows and all.
	down, err := p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.NotEmpty(t, down)
	requireSchema(t, db, false)
	current, _, err = p.GetVersions(ctx)
	require.NoError(t, err)
	require.Zero(t, current)

	// And up again from there.
	_, err = p.Up(ctx)
	require.NoError(t, err)
	requireSchema(t, db, true)
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM backfills`))
	require.Zero(t, n, "the second up starts from an empty schema")

	// A second Up is a no-op.
	again, err := p.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, again)
	require.NoError(t, migrations.Up(ctx, db.DB))
}

// Migration 00010 moves the state a takeover kept from the old owner's slot (frozen_*) to
// the new owner's (prior_*), and its Down moves it back: a history written before the
// upgrade reads the same after it, and after a downgrade.
func TestMigration00010KeepsTakeoverHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyDatabaseWithMigrations(t)
	_, err := p.UpTo(ctx, 9)
	require.NoError(t, err)

	// Backfill a ran the run and failed; backfill b took it over (as 00009's code did it:
	// frozen_* written on a's slot).
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.Exec(q, args...)
		require.NoError(t, err)
	}
	exec(`INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('mig10', '@daily', 'UTC', 1, false, now(), now())`)
	newBackfill := func() int64 {
		var id int64
		require.NoError(t, db.Get(&id, `INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior,
				max_active_runs, state, created_at, updated_at, num_queued)
			VALUES ('mig10', '2024-01-01', '2024-01-02', false, 'failed', 1, 'running', now(), now(), 1) RETURNING id`))
		return id
	}
	a := newBackfill()
	var run int64
	require.NoError(t, db.Get(&run, `INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end,
			state, run_type, backfill_id, backfill_sort_ordinal, attempt)
		VALUES ('mig10', 'backfill__2024-01-01T00:00:00Z', '2024-01-01', '2024-01-01', '2024-01-02', 'queued', 'backfill', $1, 1, 1)
		RETURNING id`, a))
	exec(`INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id) VALUES ($1, 1, '2024-01-01', $2)`, a, run)
	exec(`UPDATE dag_runs SET state = 'failed', attempt = 2, note = 'broke' WHERE id = $1`, run)
	exec(`UPDATE backfills SET state = 'failed', completed_at = now() WHERE id = $1`, a)
	b := newBackfill()
	exec(`UPDATE backfill_dag_runs SET frozen_state = 'failed', frozen_attempt = 2, frozen_note = 'broke' WHERE backfill_id = $1`, a)
	exec(`UPDATE dag_runs SET state = 'queued', attempt = 1, note = NULL, backfill_id = $2 WHERE id = $1`, run, b)
	exec(`INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id) VALUES ($1, 1, '2024-01-01', $2)`, b, run)

	_, err = p.UpTo(ctx, 10)
	require.NoError(t, err)
	type record struct {
		BackfillID int64   `db:"backfill_id"`
		TakenOver  bool    `db:"taken_over"`
		State      string  `db:"state"`
		Attempt    int     `db:"attempt"`
		Note       *string `db:"note"`
	}
	var got []record
	require.NoError(t, db.Select(&got, `SELECT backfill_id, taken_over, state, attempt, note FROM backfill_slot_records ORDER BY backfill_id`))
	require.Equal(t, []record{
		{BackfillID: a, TakenOver: true, State: "failed", Attempt: 2, Note: new("broke")},
		{BackfillID: b, TakenOver: false, State: "queued", Attempt: 1},
	}, got)

	_, err = p.DownTo(ctx, 9)
	require.NoError(t, err)
	type frozen struct {
		BackfillID int64   `db:"backfill_id"`
		State      *string `db:"frozen_state"`
		Attempt    *int    `db:"frozen_attempt"`
		Note       *string `db:"frozen_note"`
	}
	var back []frozen
	require.NoError(t, db.Select(&back, `SELECT backfill_id, frozen_state, frozen_attempt, frozen_note FROM backfill_dag_runs ORDER BY backfill_id`))
	require.Equal(t, []frozen{
		{BackfillID: a, State: new("failed"), Attempt: new(2), Note: new("broke")},
		{BackfillID: b},
	}, back)
}

package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/pgurl"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

// insertBackfill writes one DAG and one backfill for it, the smallest row set the schema
// accepts for a backfill.
func insertBackfill(t *testing.T, db *sqlx.DB, dagID string) {
	t.Helper()
	_, err := db.Exec(`INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ($1, '@daily', 'UTC', 1, false, now(), now())`, dagID)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior,
			max_active_runs, state, created_at, updated_at)
		VALUES ($1, '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now())`, dagID)
	require.NoError(t, err)
}

func countBackfills(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM backfills`))
	return n
}

func requireMigrated(t *testing.T, db *sqlx.DB) {
	t.Helper()
	var table sql.NullString
	require.NoError(t, db.Get(&table, `SELECT to_regclass('public.backfills')::text`))
	require.True(t, table.Valid, "table backfills must exist in a fresh database")
}

// Two databases from one process are separate, migrated copies of the template.
func TestDatabasesAreIsolated(t *testing.T) {
	a, dsnA := Open(t)
	b, dsnB := Open(t)
	require.NotEqual(t, dsnA, dsnB)

	requireMigrated(t, a)
	requireMigrated(t, b)

	insertBackfill(t, a, "isolated")
	assert.Equal(t, 1, countBackfills(t, a))
	assert.Equal(t, 0, countBackfills(t, b), "a row written in one database must be invisible in the other")
}

// Parallel tests each get their own database. They all insert the same primary key, so any
// sharing would surface as a unique violation or a count above one.
func TestParallelTestsGetOwnDatabases(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db, _ := Open(t)
			requireMigrated(t, db)
			insertBackfill(t, db, "same_dag")
			assert.Equal(t, 1, countBackfills(t, db))
		})
	}
}

func TestDSNSettings(t *testing.T) {
	db, dsn := Open(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	assert.Equal(t, "disable", u.Query().Get("sslmode"))
	assert.Equal(t, "UTC", u.Query().Get("timezone"))

	var tz string
	require.NoError(t, db.Get(&tz, `SHOW timezone`))
	assert.Equal(t, "UTC", tz)
}

func TestEmptyDatabaseIsNotMigrated(t *testing.T) {
	db, err := sqlx.Open("postgres", NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	var table sql.NullString
	require.NoError(t, db.Get(&table, `SELECT to_regclass('public.backfills')::text`))
	assert.False(t, table.Valid)
}

// A test's database is gone once the test is over, so a normal run leaves nothing behind.
func TestCleanupDropsDatabase(t *testing.T) {
	var name string
	t.Run("uses a database", func(t *testing.T) {
		db, dsn := Open(t)
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		name = strings.TrimPrefix(u.Path, "/")
		requireMigrated(t, db)
	})
	require.NotEmpty(t, name)
	current.Load().drops.Wait() // drops run in the background

	admin, err := sqlx.Open("postgres", AdminDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	var exists bool
	require.NoError(t, admin.Get(&exists, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name))
	assert.False(t, exists, "database %s must be dropped by the test's cleanup", name)
}

// The template itself refuses connections, so nothing can block CREATE DATABASE ... TEMPLATE.
func TestTemplateRefusesConnections(t *testing.T) {
	st := current.Load()
	require.NotNil(t, st)
	db, err := sql.Open("postgres", pgurl.Database(st.adminURL, st.template))
	require.NoError(t, err)
	defer db.Close()
	err = db.Ping()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not currently accepting connections")
}

// A wrong TEST_DATABASE_URL is an error that names the variable, not a silent fallback.
func TestBadURLFailsLoudly(t *testing.T) {
	t.Setenv(EnvURL, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	_, err := findServer(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), EnvURL)
	assert.Contains(t, err.Error(), "127.0.0.1:1")

	t.Setenv(EnvURL, "host=localhost password=secret")
	_, err = findServer(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), EnvURL)
	assert.NotContains(t, err.Error(), "secret")
}

func TestIsStale(t *testing.T) {
	now := time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)
	recent := now.Add(-time.Minute).Format(time.RFC3339)
	old := now.Add(-25 * time.Hour).Format(time.RFC3339)
	const deadPID = 1 << 30 // above any pid_max Linux allows

	cases := []struct {
		name    string
		comment string
		want    bool
	}{
		{"unlabelled", "", false},
		{"dead process on this host", fmt.Sprintf("pgtest host=h pid=%d created=%s", deadPID, recent), true},
		{"dead pid on another host", fmt.Sprintf("pgtest host=other pid=%d created=%s", deadPID, recent), false},
		{"live process on this host", fmt.Sprintf("pgtest host=h pid=%d created=%s", 1, recent), false},
		{"older than a day, any host", fmt.Sprintf("pgtest host=other pid=1 created=%s", old), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, isStale(c.comment, "h", now))
		})
	}
}

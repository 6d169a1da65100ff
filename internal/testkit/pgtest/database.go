package pgtest

// The per-test databases: each a copy of the template, created for one test and dropped in
// the background when it ends.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/pgurl"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// NewDatabase creates a fresh database from the template (CREATE DATABASE x TEMPLATE tpl),
// registers t.Cleanup to drop it (WITH (FORCE), in the background so that the test does not
// wait for it; Main waits for every drop before it exits), and returns its DSN (a lib/pq URL with
// sslmode=disable and timezone=UTC unless TEST_DATABASE_URL chose otherwise).
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// NewEmptyDatabase is NewDatabase without the migrations: the database is a copy of
// template0. Migration up/down tests start from it.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

// Open returns an *sqlx.DB on a fresh database (NewDatabase + sqlx.Open("postgres", dsn),
// closed by t.Cleanup before the database is dropped) and the database's DSN.
func Open(t testing.TB) (*sqlx.DB, string) {
	t.Helper()
	dsn := NewDatabase(t)
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", redact(dsn), err)
	}
	// Cleanups run last-in first-out, so this Close runs before NewDatabase's DROP.
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("pgtest: ping %s: %v", redact(dsn), err)
	}
	return db, dsn
}

// AdminDSN returns the DSN of the server's maintenance database (for tests that create/drop
// their own databases, e.g. migration up/down tests). It panics outside a test binary whose
// TestMain calls Main, because there is no server to name then.
func AdminDSN() string {
	st := current.Load()
	if st == nil {
		panic("pgtest: AdminDSN needs pgtest.Main in TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	return st.adminURL.String()
}

func newDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	st := current.Load()
	if st == nil {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	name := st.prefix + strconv.FormatInt(counter.Add(1), 10)
	template := "template0"
	if migrated {
		template = st.template
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.createDatabase(ctx, name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { st.dropLater(name) })
	return pgurl.Database(st.adminURL, name)
}

// createDatabase copies template into a new database called name and labels it for the
// stale sweep.
func (st *state) createDatabase(ctx context.Context, name, template string) error {
	query := "CREATE DATABASE " + pq.QuoteIdentifier(name) + " TEMPLATE " + pq.QuoteIdentifier(template)

	createMu.Lock()
	var err error
	for attempt := 1; ; attempt++ {
		_, err = st.admin.ExecContext(ctx, query)
		// 55006 "source database is being accessed by other users": PostgreSQL already waits
		// 5 s for stray sessions (an autovacuum worker, a backend still exiting after the
		// migration pool closed) before giving up; a few more tries cover a slow machine.
		if pq.As(err, pqerror.ObjectInUse) == nil || attempt == 5 {
			break
		}
		select {
		case <-ctx.Done():
			createMu.Unlock()
			return fmt.Errorf("create database %s from %s: %w (last error: %v)", name, template, ctx.Err(), err)
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	createMu.Unlock()
	if err != nil {
		return fmt.Errorf("create database %s from %s: %w", name, template, err)
	}

	// The label is best effort: without it the sweep leaves the database alone.
	_, _ = st.admin.ExecContext(ctx, "COMMENT ON DATABASE "+pq.QuoteIdentifier(name)+" IS "+pq.QuoteLiteral(st.comment))
	return nil
}

// dropLater drops a test's database in the background once the test is over.
func (st *state) dropLater(name string) {
	st.dropBacklog <- struct{}{}
	st.drops.Add(1)
	go func() {
		defer st.drops.Done()
		defer func() { <-st.dropBacklog }()
		st.dropSlots <- struct{}{}
		defer func() { <-st.dropSlots }()
		// The test has finished, so it cannot be failed any more; tearDown retries whatever
		// is left over.
		if err := st.dropDatabase(name); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}()
}

// dropDatabase drops name. FORCE ends sessions a test leaked (an unclosed pool, a stuck
// listener) instead of leaving the database behind.
func (st *state) dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := st.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

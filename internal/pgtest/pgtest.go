// Package pgtest gives each test its own migrated PostgreSQL database.
//
// A package opts in from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Main migrates one template database per test process; NewDatabase and Open then clone it
// with CREATE DATABASE ... TEMPLATE, which takes milliseconds, so every test (parallel or
// not) gets a private, fully migrated schema without re-running the migrations.
//
// The server is found in this order:
//
//  1. TEST_DATABASE_URL, a lib/pq URL of any database on the server (CI sets it);
//  2. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable (a developer's local server);
//  3. a throwaway postgres:16-alpine container started with testcontainers-go (needs Docker).
//
// If none answers, Main fails the test binary and says what it tried: a database test that
// silently skips is a test that never runs.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/backfillsvc/backfill/migrations"
)

const (
	// EnvURL names the variable that points the harness at a specific server.
	EnvURL = "TEST_DATABASE_URL"

	localURL       = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	containerImage = "postgres:16-alpine"

	// Every database the harness creates starts with one of these prefixes, which is how
	// the stale-database sweep recognises them. Test database names are
	// bf_t_<pid>_<token>_<n>, the template is bf_tpl_<pid>_<token>: the pid and a random
	// token keep test binaries that run in parallel (go test ./...) apart, even when
	// several hosts share one server.
	templatePrefix = "bf_tpl_"
	testDBPrefix   = "bf_t_"

	// staleAfter is how old an unused harness database must be before any run may drop it,
	// whatever host created it. Runs on this host are recognised sooner, by their pid.
	staleAfter = 24 * time.Hour
)

// state is what Main sets up for the whole test process.
type state struct {
	adminURL *url.URL // maintenance connection; databases are created and dropped through it
	admin    *sql.DB
	template string
	prefix   string // bf_t_<pid>_<token>_
	comment  string // COMMENT ON DATABASE text, read back by the stale sweep

	// Test databases are dropped in the background: DROP DATABASE waits for a checkpoint and
	// a barrier across all backends (0.75 s or more on a busy server with fsync on), which
	// would otherwise be added to every test. drops tracks them so that Main waits for all
	// before it exits; dropSlots caps how many run at once; dropBacklog caps how many may be
	// outstanding, making a test's cleanup wait when drops fall behind creates, so that a
	// long run cannot pile up hundreds of databases (each ~8 MB) on the server.
	drops       sync.WaitGroup
	dropSlots   chan struct{}
	dropBacklog chan struct{}
}

var (
	current atomic.Pointer[state]
	counter atomic.Int64

	// createMu serialises CREATE DATABASE ... TEMPLATE within the process. PostgreSQL
	// refuses to copy a template while any other session is connected to it, and
	// CREATE DATABASE holds a lock that makes concurrent copies of one template wait on
	// each other anyway, so serialising costs nothing and removes a class of flakes.
	createMu sync.Mutex
)

// Main is called from TestMain: it finds a PostgreSQL server, creates one migrated template
// database, runs the tests, drops the template, and exits.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// run is Main without os.Exit, so that its deferred cleanups (drop the template, stop the
// container) happen before the process ends.
func run(m *testing.M) int {
	ctx := context.Background()

	srv, err := findServer(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: no PostgreSQL server for the tests.\n%v\n", err)
		return 1
	}
	defer srv.stop()

	st, err := setUp(ctx, srv.url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: setting up the template database on %s: %v\n", srv.url.Redacted(), err)
		return 1
	}
	defer st.tearDown()

	current.Store(st)
	defer current.Store(nil)
	return m.Run()
}

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
	return dsnFor(st.adminURL, name)
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

// setUp connects to the server, sweeps databases that crashed runs left behind, and creates
// and migrates this process's template.
func setUp(ctx context.Context, adminURL *url.URL) (*state, error) {
	admin, err := sql.Open("postgres", adminURL.String())
	if err != nil {
		return nil, err
	}
	// A handful of connections is plenty (CREATEs are serialised, DROPs are quick) and
	// keeps a process's footprint small next to its tests' own pools.
	admin.SetMaxOpenConns(4)
	admin.SetMaxIdleConns(2)

	token := randomToken()
	pid := os.Getpid()
	host, _ := os.Hostname()
	st := &state{
		adminURL:    adminURL,
		admin:       admin,
		dropSlots:   make(chan struct{}, 2),
		dropBacklog: make(chan struct{}, 8),
		template:    fmt.Sprintf("%s%d_%s", templatePrefix, pid, token),
		prefix:      fmt.Sprintf("%s%d_%s_", testDBPrefix, pid, token),
		comment:     fmt.Sprintf("pgtest host=%s pid=%d created=%s", strings.ReplaceAll(host, " ", "_"), pid, time.Now().UTC().Format(time.RFC3339)),
	}

	sweepStale(ctx, admin, host)

	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := st.createDatabase(ctx, st.template, "template0"); err != nil {
		_ = admin.Close()
		return nil, err
	}
	if err := migrateTemplate(ctx, dsnFor(adminURL, st.template)); err != nil {
		st.tearDown()
		return nil, err
	}
	// No session may be connected to a template while it is copied. Forbidding connections
	// outright makes that hold even if a test somehow learns the template's name.
	if _, err := admin.ExecContext(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(st.template)+" ALLOW_CONNECTIONS false"); err != nil {
		st.tearDown()
		return nil, fmt.Errorf("lock template %s: %w", st.template, err)
	}
	return st, nil
}

// migrateTemplate applies the migrations to the template and closes every connection it
// opened, since CREATE DATABASE ... TEMPLATE fails while any session is connected to it.
func migrateTemplate(ctx context.Context, dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	if _, err := db.ExecContext(ctx, testClockSQL); err != nil {
		return fmt.Errorf("install the test clock in the template: %w", err)
	}
	return db.Close()
}

// testClockSQL replaces the service's clock, backfill_now() (migrations/00002_one_clock.sql),
// in test databases with one that a test can stop and move: while test_clock holds a row, the
// database's time is that row's instant; without one it is now(). SetClock writes the row.
const testClockSQL = `
CREATE TABLE test_clock (singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), now timestamptz NOT NULL);
CREATE OR REPLACE FUNCTION backfill_now() RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT coalesce((SELECT now FROM test_clock), now()) $$;`

// SetClock stops the database's clock (backfill_now()) at t, in a database made by this
// package. Tests move time forward by calling it again.
func SetClock(ctx context.Context, db sqlx.ExecerContext, t time.Time) error {
	_, err := db.ExecContext(ctx, `
		INSERT INTO test_clock (now) VALUES ($1)
		ON CONFLICT (singleton) DO UPDATE SET now = EXCLUDED.now`, t)
	if err != nil {
		return fmt.Errorf("pgtest: set clock: %w", err)
	}
	return nil
}

// tearDown waits for the background drops, drops anything of this run they missed, then
// the template, and closes the admin pool: a normal run leaves no database behind.
func (st *state) tearDown() {
	st.drops.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leftovers []string
	if rows, err := st.admin.QueryContext(ctx,
		`SELECT datname FROM pg_database WHERE starts_with(datname, $1)`, st.prefix); err == nil {
		for rows.Next() {
			var name string
			if rows.Scan(&name) == nil {
				leftovers = append(leftovers, name)
			}
		}
		_ = rows.Close()
	}
	for _, name := range append(leftovers, st.template) {
		if err := st.dropDatabase(name); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}
	_ = st.admin.Close()
}

// sweepStale drops harness databases that earlier runs left behind when they crashed, timed
// out or were interrupted before their cleanups ran. A database goes only if nobody is
// connected to it and either its creating process on this host is gone or it is older than
// staleAfter; plain DROP DATABASE (no FORCE) refuses anything that is still in use, so a
// parallel run is never harmed. Failures are ignored: the sweep is housekeeping.
func sweepStale(ctx context.Context, admin *sql.DB, host string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := admin.QueryContext(ctx, `
		SELECT d.datname, coalesce(shobj_description(d.oid, 'pg_database'), '')
		FROM pg_database d
		WHERE (d.datname LIKE 'bf\_tpl\_%' OR d.datname LIKE 'bf\_t\_%')
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)`)
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name, comment string
		if rows.Scan(&name, &comment) != nil {
			continue
		}
		if isStale(comment, host, time.Now()) {
			stale = append(stale, name)
		}
	}
	_ = rows.Close()
	for _, name := range stale {
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name))
	}
}

// isStale decides from a database's label whether its run is over. Unlabelled databases are
// kept: one may belong to a run that has not labelled it yet.
func isStale(comment, host string, now time.Time) bool {
	var h string
	var pid int
	var created time.Time
	for _, f := range strings.Fields(comment) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			h = v
		case "pid":
			pid, _ = strconv.Atoi(v)
		case "created":
			created, _ = time.Parse(time.RFC3339, v)
		}
	}
	if created.IsZero() {
		return false
	}
	if now.Sub(created) > staleAfter {
		return true
	}
	return h != "" && h == strings.ReplaceAll(host, " ", "_") && pid > 0 && !processAlive(pid)
}

// processAlive reports whether pid names a live process on this host. Anything short of a
// definite "no such process" counts as alive, so a doubt never drops a database.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	err = p.Signal(syscall.Signal(0))
	return !errors.Is(err, os.ErrProcessDone)
}

// server is a PostgreSQL server the harness found, and how to let it go afterwards.
type server struct {
	url  *url.URL
	stop func()
}

// findServer tries TEST_DATABASE_URL, then a local server, then a container, and returns
// the first that answers; otherwise an error listing every attempt and why it failed.
func findServer(ctx context.Context) (*server, error) {
	// An explicit TEST_DATABASE_URL is a decision: if it is wrong, say so rather than quietly
	// testing against some other server.
	if raw := os.Getenv(EnvURL); raw != "" {
		u, err := parseAdminURL(raw)
		if err != nil {
			return nil, fmt.Errorf("tried %s: %v", EnvURL, err)
		}
		if err := ping(ctx, u.String(), 15*time.Second); err != nil {
			return nil, fmt.Errorf("tried %s=%s: %v", EnvURL, u.Redacted(), err)
		}
		return &server{url: u, stop: func() {}}, nil
	}

	var tried []string
	tried = append(tried, fmt.Sprintf("  - %s: not set", EnvURL))

	local, _ := parseAdminURL(localURL)
	// Short: a local server either answers at once or is not there.
	err := ping(ctx, local.String(), 3*time.Second)
	if err == nil {
		return &server{url: local, stop: func() {}}, nil
	}
	tried = append(tried, fmt.Sprintf("  - local server %s: %v", local.Redacted(), err))

	srv, err := startContainer(ctx)
	if err == nil {
		return srv, nil
	}
	tried = append(tried, fmt.Sprintf("  - testcontainers %s: %v", containerImage, err))

	return nil, fmt.Errorf("tried, in order:\n%s\nSet %s to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), start PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres, or make Docker available",
		strings.Join(tried, "\n"), EnvURL)
}

// startContainer runs a disposable PostgreSQL in Docker. Its stop function terminates the
// container; testcontainers' reaper (Ryuk) removes it too if this process dies first.
func startContainer(ctx context.Context) (srv *server, err error) {
	// Docker detection in testcontainers has panicked in some releases when no engine is
	// present; a panic here would hide the list of what was tried.
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, containerImage, tcpostgres.BasicWaitStrategies())
	stop := func() {
		if ctr != nil {
			if err := testcontainers.TerminateContainer(ctr); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: terminate container: %v\n", err)
			}
		}
	}
	if err != nil {
		stop()
		return nil, err
	}
	raw, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		stop()
		return nil, err
	}
	u, err := parseAdminURL(raw)
	if err != nil {
		stop()
		return nil, err
	}
	if err := ping(ctx, u.String(), 30*time.Second); err != nil {
		stop()
		return nil, err
	}
	return &server{url: u, stop: stop}, nil
}

// parseAdminURL checks that raw is a lib/pq URL and fills in the connection settings the
// tests rely on, keeping any the caller chose: no TLS by default (lib/pq defaults to
// sslmode=require, which a local or container server does not offer) and UTC sessions so
// that timestamps print the same on every machine.
func parseAdminURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		// The value is not echoed: a key=value DSN would print its password into CI logs.
		return nil, errors.New("not a lib/pq URL; want one like postgres://user@host:5432/postgres?sslmode=disable")
	}
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	if q.Get("timezone") == "" {
		q.Set("timezone", "UTC")
	}
	u.RawQuery = q.Encode()
	if strings.Trim(u.Path, "/") == "" {
		u.Path = "/postgres"
	}
	return u, nil
}

// dsnFor returns the admin URL pointed at database name.
func dsnFor(admin *url.URL, name string) string {
	u := *admin
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

func ping(ctx context.Context, dsn string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// redact hides the password of a URL for messages; anything unparseable is shown as is.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return dsn
}

func randomToken() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

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
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// EnvURL names the variable that points the harness at a specific server.
	EnvURL = "TEST_DATABASE_URL"

	localURL       = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	containerImage = "postgres:16-alpine"

	// EnvPrefix names the variable that sets the prefix of every database the harness
	// creates (default defaultPrefix). The stale-database sweep recognises the harness's
	// databases by it and drops nothing else, so a shared server's other databases, and
	// another project's harness with its own prefix, are never touched. Test databases are
	// <prefix><pid>_<token>_<n>, the template <prefix>tpl_<pid>_<token>: the pid and a random
	// token keep test binaries that run in parallel (go test ./...) apart, even when several
	// hosts share one server.
	EnvPrefix     = "TEST_DB_PREFIX"
	defaultPrefix = "bf_t_"

	// staleAfter is how old an unused harness database must be before any run may drop it,
	// whatever host created it. Runs on this host are recognised sooner, by their pid.
	staleAfter = 24 * time.Hour
)

// state is what Main sets up for the whole test process.
type state struct {
	adminURL *url.URL // maintenance connection; databases are created and dropped through it
	admin    *sql.DB
	template string
	prefix   string // <TEST_DB_PREFIX><pid>_<token>_
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

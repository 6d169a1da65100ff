package tests

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/stretchr/testify/require"
)

// pooledSuite names the test whose subtests run through PgBouncer: newEnv gives every env
// made under it a store (and an event listener) that reaches PostgreSQL only through the
// pooler, in transaction mode.
const pooledSuite = "TestAPIThroughPgBouncerTransactionMode"

var (
	poolerMu   sync.Mutex
	poolerAddr string // host:port of the pooled suite's PgBouncer, set while it runs
)

// pooledAddr is the PgBouncer that t's env must go through, or "" for a direct env.
func pooledAddr(t testing.TB) string {
	if !strings.HasPrefix(t.Name(), pooledSuite+"/") {
		return ""
	}
	poolerMu.Lock()
	defer poolerMu.Unlock()
	return poolerAddr
}

// viaPooler is dsn with its host and port replaced by the pooler's: same database, same user.
func viaPooler(t testing.TB, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = addr
	q := u.Query()
	q.Set("binary_parameters", "yes")
	u.RawQuery = q.Encode()
	return u.String()
}

// startPgBouncer runs a PgBouncer of its own, in transaction pooling mode, on a free loopback
// port in front of the tests' PostgreSQL, until t ends. Without the binary the test is skipped
// on a developer's machine and fails in CI, where it must run.
func startPgBouncer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr == nil {
			bin, err = "/usr/sbin/pgbouncer", nil
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgbouncer is not installed (apt-get install pgbouncer): %v", err)
		}
		t.Skipf("pgbouncer is not installed (apt-get install pgbouncer): %v", err)
	}
	admin, err := url.Parse(pgtest.AdminDSN())
	require.NoError(t, err)
	port := freeLoopbackPort(t)
	dir := t.TempDir()
	// PgBouncer refuses to run as root; it reads its files before it drops to `user`.
	require.NoError(t, os.Chmod(dir, 0o755))
	target := fmt.Sprintf("host=%s port=%s user=%s", admin.Hostname(), orDefault(admin.Port(), "5432"), admin.User.Username())
	if pw, ok := admin.User.Password(); ok {
		target += " password=" + pw
	}
	logPath := filepath.Join(dir, "pgbouncer.log")
	conf := fmt.Sprintf(`[databases]
* = %s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
server_login_retry = 1
ignore_startup_parameters = extra_float_digits, statement_timeout
`, target, port)
	if os.Geteuid() == 0 {
		conf += "user = postgres\n"
	}
	path := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	cmd := exec.Command(bin, path)
	// Its log (stderr) goes straight to a file, which the checks below read while it runs.
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logFile, logFile
	out := pgbouncerLog(logPath)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
			// The tests that used it saw only refused connections; say why.
			t.Errorf("pgbouncer on port %d exited while the test ran:\n%s", port, out.String())
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dsn := viaPooler(t, pgtest.AdminDSN(), addr)
	// Its own "listening on" line first: a ping alone could be answered by another process
	// on the port, while this one failed to bind it and is exiting.
	listening := "listening on " + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fmt.Errorf("no %q in its log yet", listening)
		if strings.Contains(out.String(), listening) {
			err = pingOnce(dsn)
		}
		if err == nil {
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer on %s does not answer: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pgbouncerLog reads a PgBouncer's log file; a file not yet written reads as empty.
type pgbouncerLog string

func (p pgbouncerLog) String() string {
	b, err := os.ReadFile(string(p))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

func pingOnce(dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// handedPorts are the ports freeLoopbackPort has handed out in this test binary: the kernel
// may offer a port again once its probe listener is closed, and two PgBouncers of parallel
// tests (or a PgBouncer and a test that needs a port nobody listens on) must not share one.
var handedPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	handedPorts.Lock()
	defer handedPorts.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		if !handedPorts.m[port] {
			handedPorts.m[port] = true
			return port
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// TestAPIThroughPgBouncerTransactionMode runs a representative part of the suite with the
// service's store and event listener behind PgBouncer in transaction pooling mode, where each
// transaction may get another server connection: a named prepared statement kept on a
// connection, session settings or a session advisory lock would fail or leak here. Creates
// (serializable, retried, idempotent, 100k runs by COPY), claims under caps from concurrent
// workers, leases and the sweep, cancels, retries, events and their stream, webhooks.
func TestAPIThroughPgBouncerTransactionMode(t *testing.T) {
	addr := startPgBouncer(t)
	poolerMu.Lock()
	poolerAddr = addr
	poolerMu.Unlock()
	t.Cleanup(func() {
		poolerMu.Lock()
		poolerAddr = ""
		poolerMu.Unlock()
	})
	for _, test := range []func(*testing.T){
		TestBackfillCreateAnswersBackfillWithDefaultsAndQueuedRuns,
		TestBackfillCreateReprocessBehaviors,
		TestBackfillCreateIdempotencyKeyReplaysSameRequest,
		TestBackfillCreateConcurrentRequestsWithOneKeyCreateOneBackfill,
		TestBackfillCreateHundredThousandRunsInOneRequest,
		TestBackfillConcurrentCreatesForOneDagExactlyOneWins,
		TestClaimConcurrentClaimersRespectBackfillCap,
		TestClaimConcurrentClaimersRespectDagCap,
		TestClaimOrderOlderBackfillsFirst,
		TestClaimHeartbeat,
		TestLeaseMaxAttemptsFailsRun,
		TestLifecycleSweepFinalizesOnceAllRunsAreTerminal,
		TestLifecycleProgressStaysExact,
		TestCancelWithRunningRun,
		TestRetryCreatesBackfillOfFailedSlots,
		TestDagRunCreateSameLogicalDateIs409,
		TestEventCommitsWithItsChange,
		TestEventStreamFollowsBackfillToSucceeded,
		TestWebhookCreateAnswersTheSecretOnceAndReadsNeverShowIt,
		TestRaceLifecycleInvariantsUnderLoad,
		TestConfKeepsEveryNumberOnEveryEndpoint,
		TestIdempotencyComparesConfAsJsonbValues,
		TestDagPutCreatesWithDefaultsThenReplacesWhole,
		TestDagRunPatchQueuedToTerminal,
		TestEventListFiltersAndPages,
		TestWebhookDeleteAnswers204ThenTheWebhookIsGone,
	} {
		name := runtime.FuncForPC(reflect.ValueOf(test).Pointer()).Name()
		t.Run(name[strings.LastIndex(name, ".")+1:], test)
	}
}

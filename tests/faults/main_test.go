//go:build faults

// Package faults starts the real cmd/api binary as a child process against a real PostgreSQL
// database and breaks things around it: SIGKILL in the middle of a 100,000-run creation,
// connections terminated and refused under load, SIGTERM under load, two replicas sweeping
// one database. It is tagged `faults` so that `go test ./...` skips it; run it with
//
//	go test -race -tags faults -count=1 ./tests/faults/
//
// (make test-faults). The figures each test logs are the ones docs/RELIABILITY.md quotes.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// apiBinary is the cmd/api binary TestMain builds once for every test.
var apiBinary string

func TestMain(m *testing.M) {
	dir, err := buildAPI()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	// pgtest.Main exits the process, so the build directory cannot be removed afterwards;
	// each run removes the directories of earlier runs whose process is gone instead.
	_ = dir
	pgtest.Main(m)
}

// buildAPI compiles cmd/api into a fresh temporary directory, with the race detector when
// this test binary has it, so that the child processes are checked for data races too.
func buildAPI() (string, error) {
	removeStaleBuilds()
	dir, err := os.MkdirTemp("", "bf-faults-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", err
	}
	apiBinary = filepath.Join(dir, "api")
	args := []string{"build", "-o", apiBinary}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/backfillsvc/backfill/cmd/api")
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goBin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	fmt.Fprintf(os.Stderr, "faults: built %s (race=%v) in %s\n", apiBinary, raceEnabled, time.Since(start).Round(time.Millisecond))
	return dir, nil
}

// removeStaleBuilds removes bf-faults-* directories whose test process is gone.
func removeStaleBuilds() {
	for _, d := range orphanedTempDirs("bf-faults-*", "pid") {
		_ = os.RemoveAll(d)
	}
}

// orphanedTempDirs lists the temporary directories matching pattern whose owner, the process
// whose pid the directory's file pidFile holds, is gone.
func orphanedTempDirs(pattern, pidFile string) []string {
	var orphaned []string
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, pidFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		orphaned = append(orphaned, d)
	}
	return orphaned
}

// ---- the child process -------------------------------------------------------------------

// proc is one running cmd/api process.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	// URL is http://127.0.0.1:<port>, read from the "serving" log line.
	URL string

	mu     sync.Mutex
	stdout []string
	stderr bytes.Buffer

	exited  chan struct{}
	waitErr error
}

// startProc starts cmd/api on dsn with HTTP_ADDR=127.0.0.1:0 and env (NAME=value pairs) and
// waits until it serves. The process is killed when the test ends if it still runs.
func startProc(t testing.TB, name, dsn string, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(apiBinary)
	p.cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + withAppName(dsn, name),
		"HTTP_ADDR=127.0.0.1:0",
		"DB_MAX_CONNS=8",
		"GORACE=halt_on_error=0",
	}, env...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	serving := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stdout = append(p.stdout, line)
			p.mu.Unlock()
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "serving" {
				select {
				case serving <- entry.Addr:
				default:
				}
			}
		}
	}()
	go func() {
		<-readDone // Wait must come after the pipe is drained
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if strings.Contains(p.Stderr(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", name, p.Stderr())
		}
		if t.Failed() {
			p.dumpLogs(40)
		}
	})
	select {
	case addr := <-serving:
		p.URL = "http://" + addr
	case <-p.exited:
		p.dumpLogs(40)
		t.Fatalf("%s exited before serving: %v", name, p.waitErr)
	case <-time.After(60 * time.Second):
		p.dumpLogs(40)
		t.Fatalf("%s did not serve within 60 s", name)
	}
	return p
}

// withAppName tags the process's database sessions so that pg_stat_activity tells them apart.
func withAppName(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Logs returns the JSON log lines so far.
func (p *proc) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.stdout...)
}

// Stderr returns what the process wrote to stderr.
func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// HasLog reports whether a log line has this msg.
func (p *proc) HasLog(msg string) bool {
	for _, l := range p.Logs() {
		var e struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == msg {
			return true
		}
	}
	return false
}

// waitLog waits for a log line with this msg and returns the time it carries.
func (p *proc) waitLog(t testing.TB, msg string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, l := range p.Logs() {
			var e struct {
				Time time.Time `json:"time"`
				Msg  string    `json:"msg"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Msg == msg {
				return e.Time
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s did not log %q within %s", p.name, msg, timeout)
	return time.Time{}
}

// LogsWithLevel counts log lines at a level (ERROR, WARN).
func (p *proc) LogsWithLevel(level string) []string {
	var out []string
	for _, l := range p.Logs() {
		var e struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Level == level {
			out = append(out, l)
		}
	}
	return out
}

func (p *proc) dumpLogs(n int) {
	logs := p.Logs()
	if len(logs) > n {
		logs = logs[len(logs)-n:]
	}
	p.t.Logf("last %d log lines of %s:\n%s\nstderr:\n%s", len(logs), p.name, strings.Join(logs, "\n"), lastBytes(p.Stderr(), 4000))
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *proc) Kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s survived SIGKILL for 30 s", p.name)
	}
}

// Signal sends sig.
func (p *proc) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// Wait waits for the process to exit and returns its exit code (-1 if killed by a signal).
func (p *proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s still running after %s", p.name, timeout)
	}
	if p.waitErr == nil {
		return 0, nil
	}
	var exitErr *exec.ExitError
	if errors.As(p.waitErr, &exitErr) {
		return exitErr.ExitCode(), nil
	}
	return 0, p.waitErr
}

// ---- HTTP --------------------------------------------------------------------------------

// answer is one HTTP answer of the service.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Problem decodes a problem+json answer (zero value if it is not one).
func (a *answer) Problem() problem {
	var p problem
	if strings.HasPrefix(a.Header.Get("Content-Type"), "application/problem+json") {
		_ = json.Unmarshal(a.Body, &p)
	}
	return p
}

type problem struct {
	Status           int    `json:"status"`
	Code             string `json:"code"`
	Detail           string `json:"detail"`
	ActiveBackfillID *int64 `json:"active_backfill_id"`
}

func (a *answer) String() string {
	body := string(a.Body)
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	return fmt.Sprintf("%d %s", a.Status, body)
}

// client sends JSON requests to one base URL.
type client struct {
	base string
	http *http.Client
}

func newClient(base string, keepAlive bool) *client {
	tr := &http.Transport{
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return &client{base: base, http: &http.Client{Transport: tr, Timeout: 90 * time.Second}}
}

func (c *client) do(ctx context.Context, method, path string, body any, headers ...string) (*answer, error) {
	var payload io.Reader
	if body != nil {
		switch b := body.(type) {
		case string:
			payload = strings.NewReader(b)
		case []byte:
			payload = bytes.NewReader(b)
		case io.Reader:
			payload = b
		default:
			raw, err := json.Marshal(b)
			if err != nil {
				return nil, err
			}
			payload = bytes.NewReader(raw)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, payload)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return &answer{Status: res.StatusCode, Header: res.Header, Body: data}, nil
}

// must sends a request and fails the test on a transport error or an unexpected status.
func (c *client) must(t testing.TB, method, path string, body any, want ...int) *answer {
	t.Helper()
	a, err := c.do(context.Background(), method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	for _, w := range want {
		if a.Status == w {
			return a
		}
	}
	t.Fatalf("%s %s: want %v, got %s", method, path, want, a)
	return nil
}

func decode[T any](t testing.TB, a *answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(a.Body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, a, err)
	}
	return v
}

// isConnRefused reports whether err is a refused TCP connection.
func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// ---- database ----------------------------------------------------------------------------

// testDB is a fresh migrated database and a pool on it for the test's own checks.
type testDB struct {
	DSN  string
	Name string
	DB   *sqlx.DB
}

func newTestDB(t testing.TB) *testDB {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlx.Open("postgres", withAppName(dsn, "faults_checker"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = db.Close() })
	return &testDB{DSN: dsn, Name: strings.TrimPrefix(u.Path, "/"), DB: db}
}

// adminDB is a small pool on the server's maintenance database, for pg_stat_activity,
// pg_terminate_backend and ALTER DATABASE.
var adminDB = sync.OnceValues(func() (*sqlx.DB, error) {
	db, err := sqlx.Open("postgres", pgtest.AdminDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(3)
	return db, nil
})

func admin(t testing.TB) *sqlx.DB {
	t.Helper()
	db, err := adminDB()
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// terminateBackends ends every session on the database except the test's checker pool,
// and returns how many it ended.
func terminateBackends(ctx context.Context, t testing.TB, dbName string) (int, error) {
	var n int
	err := admin(t).GetContext(ctx, &n, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name <> 'faults_checker'`, dbName)
	return n, err
}

// backends counts the sessions on the database by application_name.
func backends(t testing.TB, dbName string) map[string]int {
	t.Helper()
	rows := []struct {
		App string `db:"application_name"`
		N   int    `db:"n"`
	}{}
	if err := admin(t).Select(&rows, `SELECT application_name, count(*) AS n FROM pg_stat_activity
		WHERE datname = $1 GROUP BY application_name`, dbName); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.App] = r.N
	}
	return out
}

// waitNoBackends waits until no session of these applications is left on the database (a
// killed process's backends finish their statement before they notice) and returns how long
// that took.
func waitNoBackends(t testing.TB, dbName string, apps ...string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		left := 0
		now := backends(t, dbName)
		for _, a := range apps {
			left += now[a]
		}
		if left == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of %v still on %s after 60 s", left, apps, dbName)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func setAllowConnections(ctx context.Context, t testing.TB, dbName string, allow bool) error {
	_, err := admin(t).ExecContext(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", pq.QuoteIdentifier(dbName), allow))
	return err
}

// counts is a snapshot of row counts.
type counts struct {
	Backfills, Runs, Slots, IdempotencyKeys int
}

func countRows(t testing.TB, db *sqlx.DB) counts {
	t.Helper()
	var c counts
	err := db.QueryRow(`SELECT (SELECT count(*) FROM backfills), (SELECT count(*) FROM dag_runs),
		(SELECT count(*) FROM backfill_dag_runs), (SELECT count(*) FROM idempotency_keys)`).
		Scan(&c.Backfills, &c.Runs, &c.Slots, &c.IdempotencyKeys)
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return c
}

// ---- load bookkeeping --------------------------------------------------------------------

// failures collects problems seen on load goroutines.
type failures struct{ loadkit.Failures }

func (f *failures) check(t testing.TB) {
	t.Helper()
	if n, msgs := f.Summary(); n > 0 {
		t.Errorf("%d failures under load:\n%s", n, msgs)
	}
}

// statusTally counts answers by status.
type statusTally struct {
	mu sync.Mutex
	m  map[int]int
}

func (s *statusTally) add(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[int]int{}
	}
	s.m[status]++
}

func (s *statusTally) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.m {
		n += v
	}
	return n
}

func (s *statusTally) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]int, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d×%d", s.m[k], k))
	}
	return strings.Join(parts, " ")
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// goTool finds the go command that builds the binary under test: the one on PATH, else the
// toolchain's own bin directory as `go test` reports it in GOROOT (runtime.GOROOT is
// deprecated, and meaningless in a copied binary; a test binary runs where it was built).
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go"), nil
	}
	return "", fmt.Errorf("no go command on PATH and GOROOT is unset: cannot build the service under test")
}

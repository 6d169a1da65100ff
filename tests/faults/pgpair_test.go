//go:build faults

package faults

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// pgNode is a throwaway PostgreSQL server in a temporary folder, run as the postgres OS
// user when the test runs as root (initdb refuses root). The shared server on 5432 is never
// touched: failover tests kill and promote these instead.
type pgNode struct {
	t    testing.TB
	name string
	dir  string
	port int
}

// pgBinDir finds PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup).
func pgBinDir(t testing.TB) string {
	t.Helper()
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	t.Skip("no PostgreSQL server binaries (initdb) on this machine: the failover tests need them")
	return ""
}

// pgCmd runs a PostgreSQL binary as the postgres user (or as ourselves when not root).
func pgCmd(t testing.TB, bin string, args ...string) *exec.Cmd {
	path := filepath.Join(pgBinDir(t), bin)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	// The postgres user may not be allowed into the checkout (a clone under /root).
	cmd.Dir = os.TempDir()
	return cmd
}

func runPG(t testing.TB, bin string, args ...string) {
	t.Helper()
	out, err := pgCmd(t, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pgTempDir makes a folder the postgres user owns; it is removed when the test ends.
func pgTempDir(t testing.TB, name string) string {
	t.Helper()
	// Short: the Unix socket path must stay under ~100 bytes.
	dir, err := os.MkdirTemp("", "bf-pg-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "postgres:", dir).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v %s", dir, err, out)
		}
	}
	return dir
}

// appendConf adds settings at the end of a configuration file (the last one wins).
func (n *pgNode) appendConf(file string, lines ...string) {
	n.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, "data", file), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
		n.t.Fatal(err)
	}
}

func (n *pgNode) data() string { return filepath.Join(n.dir, "data") }

// start starts the server and waits until it accepts connections.
func (n *pgNode) start() {
	n.t.Helper()
	runPG(n.t, "pg_ctl", "-D", n.data(), "-l", filepath.Join(n.dir, "log"), "-w", "-t", "60", "start")
	n.t.Cleanup(func() {
		// Immediate: the folder is thrown away. A node killed or stopped already makes
		// pg_ctl fail, which is fine.
		_ = pgCmd(n.t, "pg_ctl", "-D", n.data(), "-m", "immediate", "-w", "stop").Run()
	})
}

// addr is host:port.
func (n *pgNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// dsn is a lib/pq URL to database db on this node alone.
func (n *pgNode) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", n.addr(), db)
}

// open is a small pool for the test's own checks.
func (n *pgNode) open(db string) *sqlx.DB {
	n.t.Helper()
	conn, err := sqlx.Open("postgres", withAppName(n.dsn(db), "faults_checker"))
	if err != nil {
		n.t.Fatal(err)
	}
	conn.SetMaxOpenConns(2)
	n.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// kill sends SIGKILL to the postmaster, as a crashed machine stops: no shutdown, no
// goodbye to clients. The backends notice the postmaster is gone and exit on their own,
// which closes their connections.
func (n *pgNode) kill() {
	n.t.Helper()
	raw, err := os.ReadFile(filepath.Join(n.data(), "postmaster.pid"))
	if err != nil {
		n.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(raw), "\n", 2)[0])
	if err != nil {
		n.t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		n.t.Fatalf("kill -9 %d: %v", pid, err)
	}
}

// pgPair is a primary and a streaming standby with synchronous replication
// (synchronous_commit = remote_apply): a commit is acknowledged only once the standby has
// applied it, so a promoted standby has every acknowledged commit.
type pgPair struct {
	primary, standby *pgNode
}

// stopStaleClusters stops and removes the throwaway clusters of test processes that died
// without cleaning up (killed by a timeout, say), so that they do not run on for ever.
func stopStaleClusters(t testing.TB) {
	for _, d := range orphanedTempDirs("bf-pg-*", "owner") {
		_ = pgCmd(t, "pg_ctl", "-D", filepath.Join(d, "data"), "-m", "immediate", "-w", "stop").Run()
		_ = os.RemoveAll(d)
	}
}

func newPGPair(t testing.TB, name string) *pgPair {
	t.Helper()
	stopStaleClusters(t)
	start := time.Now()
	p := &pgPair{
		primary: &pgNode{t: t, name: name + "-primary", dir: pgTempDir(t, name+"p"), port: freePort(t)},
		standby: &pgNode{t: t, name: name + "-standby", dir: pgTempDir(t, name+"s"), port: freePort(t)},
	}
	pr := p.primary
	runPG(t, "initdb", "-D", pr.data(), "-U", "postgres", "--auth=trust", "--no-sync", "--no-instructions", "-E", "UTF8")
	pr.appendConf("postgresql.conf",
		"listen_addresses = '127.0.0.1'",
		"port = "+strconv.Itoa(pr.port),
		"unix_socket_directories = '"+pr.dir+"'",
		"max_connections = 60",
		"shared_buffers = 32MB",
		"wal_level = replica",
		"max_wal_senders = 4",
		"hot_standby = on",
		// Throwaway data on a shared test machine; fsync does not change what replication
		// acknowledges.
		"fsync = off",
		"full_page_writes = off",
		"synchronous_standby_names = 'standby'",
		"synchronous_commit = remote_apply",
		"log_min_messages = warning",
	)
	pr.start()
	sb := p.standby
	runPG(t, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(pr.port), "-U", "postgres",
		"-D", sb.data(), "-R", "-X", "stream", "--no-sync")
	sb.appendConf("postgresql.auto.conf",
		"port = "+strconv.Itoa(sb.port),
		"unix_socket_directories = '"+sb.dir+"'",
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=standby'", pr.port),
		// Once promoted it has no standby of its own; waiting for one would hang every
		// commit.
		"synchronous_standby_names = ''",
	)
	sb.start()

	// Wait until the standby streams synchronously, then make the service's database.
	db := pr.open("postgres")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.Get(&n, `SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync'`)
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not stream synchronously within 30 s (%d, %v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := db.Exec(`CREATE DATABASE backfill`); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: primary on %d, synchronous standby on %d, ready in %s", name, pr.port, sb.port, time.Since(start).Round(10*time.Millisecond))
	return p
}

// promote makes the standby the primary and waits until it is one.
func (p *pgPair) promote() {
	p.standby.t.Helper()
	runPG(p.standby.t, "pg_ctl", "-D", p.standby.data(), "-w", "-t", "30", "promote")
}

// multiHostDSN lists both nodes in libpq's host:port URL form, writable host only.
func (p *pgPair) multiHostDSN() string {
	return fmt.Sprintf("postgres://postgres@%s,%s/backfill?sslmode=disable&target_session_attrs=read-write",
		p.primary.addr(), p.standby.addr())
}

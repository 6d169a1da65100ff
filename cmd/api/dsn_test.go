package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// The three forms of libpq's documentation end up as the same key=value string for lib/pq,
// with the hosts and ports paired as libpq pairs them.
func TestDSNFormsFromLibpqDocsReadAlike(t *testing.T) {
	want := "dbname='bf' host='db1,db2' password='p w' port='5433,5434' sslmode='disable' target_session_attrs='read-write' user='svc'"
	for _, raw := range []string{
		"postgres://svc:p%20w@db1:5433,db2:5434/bf?sslmode=disable&target_session_attrs=read-write",
		"postgresql://svc:p%20w@db1,db2/bf?port=5433,5434&sslmode=disable&target_session_attrs=read-write",
		"host=db1,db2 port=5433,5434 dbname=bf user=svc password='p w' sslmode=disable target_session_attrs=read-write",
	} {
		d, err := parseDSN(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, d.String(), raw)
		_, err = d.connector()
		require.NoError(t, err, "lib/pq accepts what the URL was turned into: %s", raw)
	}
}

// libpq pairs a host without a port with the default port; lib/pq's own URL reading would
// have put both hosts on the one port given.
func TestDSNHostWithoutPortGetsTheDefault(t *testing.T) {
	d, err := parseDSN("postgres://u@h1,h2:5434/db?target_session_attrs=read-write")
	require.NoError(t, err)
	require.Equal(t, "h1,h2", d.params["host"])
	require.Equal(t, "5432,5434", d.params["port"], "libpq's default port for the host without one")
	_, err = d.connector()
	require.NoError(t, err)

	d, err = parseDSN("postgres://u@[::1]:5433,[fe80::1]/db?target_session_attrs=read-write")
	require.NoError(t, err)
	require.Equal(t, "::1,fe80::1", d.params["host"])
	require.Equal(t, "5433,5432", d.params["port"])

	d, err = parseDSN("postgres://u@localhost/db")
	require.NoError(t, err)
	require.NotContains(t, d.params, "port")
}

// What would silently connect somewhere else is refused at start-up, naming the right form.
func TestDSNRefusesWhatWouldConnectElsewhere(t *testing.T) {
	for _, tc := range []struct{ raw, msg string }{
		// lib/pq would look up "db1:5433" as a host name.
		{"host=db1:5433,db2:5434 dbname=bf target_session_attrs=read-write", "contains a port"},
		{"postgres://u@/bf?host=db1:5433", "contains a port"},
		// Ports given twice: which one is meant?
		{"postgres://u@db1:5433/bf?port=5434", "given both"},
		{"postgres://u@db1/bf?host=db2", "given both"},
		{"postgres://u@db1/bf?dbname=other", "given both"},
		{"postgres://u@db1/bf?database=other", "given both"},
		{"postgres://u@db1/bf?sslmode=disable&sslmode=require", "given 2 times"},
		{"host=a host=b", "given twice"},
		// Several hosts without a read-write target may land on a standby.
		{"postgres://u@db1,db2/bf", "target_session_attrs=read-write"},
		{"postgres://u@db1,db2/bf?target_session_attrs=any", "may connect to a standby"},
		{"postgres://u@db1,db2,db3/bf?port=1,2&target_session_attrs=read-write", "2 ports for 3 hosts"},
		{"postgres://u@db1:54x2/bf", "not a number"},
		{"mysql://u@db1/bf", "postgres:// URL"},
		{"just-a-host", "postgres:// URL"},
		{"host='unterminated", "unterminated"},
	} {
		_, err := parseDSN(tc.raw)
		require.Error(t, err, tc.raw)
		require.Contains(t, err.Error(), tc.msg, tc.raw)
	}
}

// The service's session settings are added, the operator's own statement and connect
// timeouts are kept, and the result is what lib/pq reads.
func TestSessionDSNAddsSettingsAndKeepsTheOperators(t *testing.T) {
	d, err := sessionDSN("postgres://u@h/db?sslmode=disable&timezone=Europe/Paris", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "UTC", d.params["timezone"], "the service answers in UTC whatever the DSN says")
	require.Equal(t, "30000", d.params["statement_timeout"])
	require.Equal(t, defaultConnectTimeout, d.params["connect_timeout"])

	d, err = sessionDSN("host=h dbname=db statement_timeout=5000 connect_timeout=7", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "5000", d.params["statement_timeout"])
	require.Equal(t, "7", d.params["connect_timeout"])

	cfg, err := pq.NewConfig(d.String())
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, cfg.ConnectTimeout)
	require.Equal(t, "UTC", cfg.Runtime["timezone"])
}

// The pools' sessions wait LOCK_WAIT at most for any lock by default (table locks come
// before a statement can set its own share); the operator's own lock_timeout is kept, a
// transaction pooler gets none (it refuses unknown startup parameters), and the direct
// sessions (migrations, LISTEN) are left as they were.
func TestPoolSessionDSNBoundsLockWaits(t *testing.T) {
	direct, err := sessionDSN("postgres://u@h/db?sslmode=disable", 30*time.Second)
	require.NoError(t, err)
	pool := poolSessionDSN(direct, 2*time.Second, poolerNone)
	require.Equal(t, "2000", pool.params["lock_timeout"])
	require.NotContains(t, direct.params, "lock_timeout", "the direct sessions' DSN is unchanged")
	cfg, err := pq.NewConfig(pool.String())
	require.NoError(t, err)
	require.Equal(t, "2000", cfg.Runtime["lock_timeout"])
	require.Equal(t, "off", cfg.Runtime["jit"], "no JIT for the service's short statements")

	require.NotContains(t, poolSessionDSN(direct, 2*time.Second, poolerTransaction).params, "lock_timeout")

	own, err := sessionDSN("host=h dbname=db lock_timeout=500", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "500", poolSessionDSN(own, 2*time.Second, poolerNone).params["lock_timeout"])
	withJIT, err := sessionDSN("host=h dbname=db jit=on", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "on", poolSessionDSN(withJIT, 2*time.Second, poolerNone).params["jit"], "the operator's choice stands")
}

// The startup log never shows the password.
func TestRedactedDSNMasksThePassword(t *testing.T) {
	for _, raw := range []string{
		"postgres://u:s3cret@h/db",
		"host=h user=u password=s3cret",
	} {
		red := redactedDSN(raw)
		require.NotContains(t, red, "s3cret")
		require.True(t, strings.Contains(red, "password='xxxxx'"), red)
	}
	require.NotContains(t, redactedDSN("postgres://u:s3cret@h:5432,h2:x/db"), "s3cret")
}

// A host that accepts TCP but never answers (a hung server, a black-holed VIP) fails a
// connect within the default connect_timeout instead of hanging it: lib/pq watches only the
// dial with the caller's context, not the startup that follows.
func TestDefaultConnectTimeoutBoundsAHungHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	d, err := sessionDSN("postgres://u@"+ln.Addr().String()+"/db?sslmode=disable", time.Minute)
	require.NoError(t, err)
	c, err := d.connector()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Connect(ctx)
	took := time.Since(start)
	require.Error(t, err)
	require.Less(t, took, 4*time.Second, "connect_timeout=%s s bounds the attempt", defaultConnectTimeout)
	require.GreaterOrEqual(t, took, 1500*time.Millisecond)
}

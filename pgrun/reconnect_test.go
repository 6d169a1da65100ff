package pgrun

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// flakyConnector refuses its first fails connections the way a dead host does, then
// connects for real.
type flakyConnector struct {
	driver.Connector
	fails    atomic.Int64
	attempts atomic.Int64
}

func (f *flakyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	f.attempts.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return f.Connector.Connect(ctx)
}

// connectorStore is a Store whose pool opens sessions through pgrun.Connector over conn.
func connectorStore(t *testing.T, dsn string, conn func(driver.Connector) driver.Connector, wait time.Duration) *DB {
	t.Helper()
	pc, err := pq.NewConnector(dsn)
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(Connector(conn(pc), wait)), "postgres")
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS tx_probe (k integer PRIMARY KEY)`)
	require.NoError(t, err)
	return New(db, Config{ReconnectWait: wait})
}

// A transaction that cannot connect for a while is run again, inside the server, until it
// can: the request is answered as if nothing had happened.
func TestTxRetriesUntilItCanConnect(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Open(t)
	var flaky *flakyConnector
	s := connectorStore(t, dsn, func(c driver.Connector) driver.Connector {
		flaky = &flakyConnector{Connector: c}
		return flaky
	}, 5*time.Second)
	// The pool is empty after the CREATE TABLE's session is closed, so the next BEGIN
	// connects.
	s.db.SetMaxIdleConns(0)
	flaky.fails.Store(4)
	var calls int
	err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		calls++
		_, err := tx.Exec(`INSERT INTO tx_probe VALUES (1)`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "fn runs only once a session is open")
	require.GreaterOrEqual(t, flaky.attempts.Load(), int64(5))
	require.Equal(t, []int{1}, probeRows(t, s))
}

// When no session can be opened for ReconnectWait, the answer is ErrUnavailable (503
// `unavailable`), after about that long and not much more.
func TestTxGivesUpConnectingAfterTheReconnectWait(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now: connections are refused
	pc, err := pq.NewConnector("postgres://u@" + addr + "/db?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(Connector(pc, 300*time.Millisecond)), "postgres")
	defer db.Close()
	s := New(db, Config{ReconnectWait: 300 * time.Millisecond})
	start := time.Now()
	called := false
	err = s.Tx(context.Background(), sql.LevelSerializable, func(tx *sqlx.Tx) error { called = true; return nil })
	took := time.Since(start)
	require.ErrorIs(t, err, ErrUnavailable)
	require.True(t, IsUnavailable(err))
	require.False(t, called)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 2*time.Second)
}

// A session killed under a statement, before COMMIT, is retried on a fresh session: the
// killed attempt's write is gone with its session, the retry's is committed once.
func TestTxRetriesASessionLostBeforeCommit(t *testing.T) {
	t.Parallel()
	s, _ := txTestStore(t)
	var attempts int
	err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		if _, err := tx.Exec(`INSERT INTO tx_probe VALUES (1)`); err != nil {
			return err
		}
		if attempts == 1 {
			var pid int
			require.NoError(t, tx.Get(&pid, `SELECT pg_backend_pid()`))
			_, err := s.db.Exec(`SELECT pg_terminate_backend($1, 5000)`, pid)
			require.NoError(t, err)
		}
		_, err := tx.Exec(`INSERT INTO tx_probe VALUES (2)`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 2, attempts)
	require.Equal(t, []int{1, 2}, probeRows(t, s))
}

// A session lost while COMMIT runs is never retried: the outcome is unknown, and running
// the work again could do it twice. A deferred trigger ends the session inside COMMIT.
func TestTxDoesNotRetryASessionLostDuringCommit(t *testing.T) {
	t.Parallel()
	s, _ := txTestStore(t)
	_, err := s.db.Exec(`
		CREATE FUNCTION die_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON tx_probe
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION die_at_commit();`)
	require.NoError(t, err)
	var attempts int
	err = s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		_, err := tx.Exec(`INSERT INTO tx_probe VALUES (1)`)
		return err
	})
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.True(t, IsUnavailable(err))
	require.Equal(t, 1, attempts)
	require.Empty(t, probeRows(t, s), "here the session died before the commit took effect")
}

// Pooled sessions whose server side is gone (as after a failover) cost no error: each
// transaction that meets one runs again on a fresh session.
func TestTxStalePooledSessionsCauseNoError(t *testing.T) {
	t.Parallel()
	s, _ := txTestStore(t)
	const n = 10
	s.db.SetMaxOpenConns(n)
	s.db.SetMaxIdleConns(n)
	// Fill the pool with n idle sessions.
	var hold sync.WaitGroup
	release := make(chan struct{})
	for range n {
		hold.Add(1)
		tx, err := s.db.Beginx()
		require.NoError(t, err)
		go func() {
			defer hold.Done()
			<-release
			_ = tx.Rollback()
		}()
	}
	close(release)
	hold.Wait()
	require.Equal(t, n, s.db.Stats().Idle)

	// Kill every one of them from outside the pool.
	admin, err := sqlx.Open("postgres", pgtest.AdminDSN())
	require.NoError(t, err)
	defer admin.Close()
	var dbName string
	require.NoError(t, s.db.Get(&dbName, `SELECT current_database()`))
	var killed int
	require.NoError(t, admin.Get(&killed, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))
		FROM pg_stat_activity WHERE datname = $1`, dbName))
	require.GreaterOrEqual(t, killed, n-1) // the Get above used one of the n

	for i := range n {
		err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
			_, err := tx.Exec(`INSERT INTO tx_probe VALUES ($1)`, i)
			return err
		})
		require.NoError(t, err, "transaction %d", i)
	}
	require.Len(t, probeRows(t, s), n)
}

// A statement stopped by statement_timeout is ErrStatementTimeout (503 `timeout`), not
// "unavailable", and is not retried; one stopped because the caller's context ended is the
// context's error.
func TestTxStatementTimeoutIsNotUnavailable(t *testing.T) {
	t.Parallel()
	s, _ := txTestStore(t)
	var attempts int
	err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		if _, err := tx.Exec(`SET LOCAL statement_timeout = '50ms'`); err != nil {
			return err
		}
		_, err := tx.Exec(`SELECT pg_sleep(2)`)
		return err
	})
	require.ErrorIs(t, err, ErrStatementTimeout)
	require.True(t, IsStatementTimeout(err))
	require.False(t, IsUnavailable(err))
	require.Equal(t, 1, attempts)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = s.Tx(ctx, sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_sleep(2)`)
		return err
	})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.False(t, IsStatementTimeout(err))
}

// A host that accepts no writes (here a session set read-only, as on a standby) fails with
// 25006, which is unavailable and retried until the reconnect wait runs out.
func TestTxReadOnlySessionIsUnavailable(t *testing.T) {
	t.Parallel()
	db, dsn := pgtest.Open(t)
	_, err := db.Exec(`CREATE TABLE tx_probe (k integer PRIMARY KEY)`)
	require.NoError(t, err)
	s := connectorStore(t, dsn, func(c driver.Connector) driver.Connector { return c }, 200*time.Millisecond)
	var attempts int
	err = s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		attempts++
		if _, err := tx.Exec(`SET TRANSACTION READ ONLY`); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO tx_probe VALUES (1)`)
		return err
	})
	require.ErrorIs(t, err, ErrUnavailable)
	require.True(t, IsReadOnly(err))
	require.Greater(t, attempts, 1)
}

// Readiness does not ride an outage out: ProbeWrite fails at the first refused connection,
// although the pool waits DB_RECONNECT_WAIT for requests.
func TestProbeWriteDoesNotWaitForAReconnect(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	pc, err := pq.NewConnector("postgres://u@" + addr + "/db?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(Connector(pc, 5*time.Second)), "postgres")
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = ProbeWrite(ctx, db)
	require.Error(t, err)
	require.True(t, IsUnavailable(err))
	require.Less(t, time.Since(start), time.Second)
}

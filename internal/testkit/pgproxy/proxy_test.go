package pgproxy_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setUp returns a direct handle on a fresh database with a table t(id int), and a proxy in
// front of its server with the DSN through it.
func setUp(t *testing.T) (*sqlx.DB, *pgproxy.Proxy, string) {
	t.Helper()
	db, dsn := pgtest.Open(t)
	_, err := db.Exec(`CREATE TABLE t (id int)`)
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p := pgproxy.Start(t, u.Host)
	return db, p, p.DSN(t, dsn)
}

// rawConn opens one lib/pq session through the proxy, with no database/sql in between, so
// that what the driver reports is seen as is.
func rawConn(t *testing.T, dsn string) driver.Conn {
	t.Helper()
	c, err := pq.NewConnector(dsn)
	require.NoError(t, err)
	conn, err := c.Connect(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func exec(conn driver.Conn, query string) error {
	_, err := conn.(driver.ExecerContext).ExecContext(context.Background(), query, nil)
	return err
}

func count(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM t`))
	return n
}

// eventually waits for the server to finish a statement whose client is gone.
func eventuallyCount(t *testing.T, db *sqlx.DB, want int) {
	t.Helper()
	require.Eventually(t, func() bool { return count(t, db) == want }, 5*time.Second, 10*time.Millisecond)
}

func TestForwardsEverythingWithoutARule(t *testing.T) {
	t.Parallel()
	db, _, dsn := setUp(t)
	through, err := sqlx.Open("postgres", dsn)
	require.NoError(t, err)
	defer through.Close()
	_, err = through.Exec(`INSERT INTO t SELECT generate_series(1, 100)`)
	require.NoError(t, err)
	var sum int
	require.NoError(t, through.Get(&sum, `SELECT sum(id) FROM t WHERE id > $1`, 0))
	require.Equal(t, 5050, sum)
	require.Equal(t, 100, count(t, db))
}

// The fault the proxy exists for: the server commits an autocommit INSERT, the client is told
// the connection died, and database/sql over lib/pq then runs the INSERT again by itself.
func TestAnswerLostAfterWriteCommitsAndTheClientSeesTheConnectionDie(t *testing.T) {
	t.Parallel()
	db, p, dsn := setUp(t)
	conn := rawConn(t, dsn)
	p.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
	err := exec(conn, `INSERT INTO t VALUES (1)`)
	require.ErrorIs(t, err, driver.ErrBadConn)
	require.Equal(t, 1, p.Fired())
	eventuallyCount(t, db, 1)

	// The same through database/sql: ErrBadConn makes it send the INSERT again.
	through, err := sqlx.Open("postgres", dsn)
	require.NoError(t, err)
	defer through.Close()
	p.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
	_, err = through.Exec(`INSERT INTO t VALUES (2)`)
	require.NoError(t, err, "database/sql hid the lost answer by running the INSERT again")
	eventuallyCount(t, db, 3)
}

func TestAnswerLostAfterWriteLeavesReadsAndOpenTransactionsAlone(t *testing.T) {
	t.Parallel()
	db, p, dsn := setUp(t)
	conn := rawConn(t, dsn)
	p.SetRule(pgproxy.AnswerLostAfterWrite())
	require.NoError(t, exec(conn, `SELECT 1`))
	require.NoError(t, exec(conn, `BEGIN`))
	require.NoError(t, exec(conn, `INSERT INTO t VALUES (1)`))
	require.Equal(t, 0, p.Fired(), "an INSERT inside a transaction has not committed yet")
	require.ErrorIs(t, exec(conn, `COMMIT`), driver.ErrBadConn)
	require.Equal(t, 1, p.Fired())
	eventuallyCount(t, db, 1)
}

func TestAtCommitBeforeTheServerSeesItRollsBack(t *testing.T) {
	t.Parallel()
	db, p, dsn := setUp(t)
	conn := rawConn(t, dsn)
	p.SetRule(pgproxy.AtCommit(pgproxy.CutBefore))
	require.NoError(t, exec(conn, `BEGIN`))
	require.NoError(t, exec(conn, `INSERT INTO t VALUES (1)`))
	require.Error(t, exec(conn, `COMMIT`))
	// The server ends the session on EOF and rolls back; wait until it has.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`))
		return n == 0
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 0, count(t, db))
}

func TestAtCommitAfterSendingItCommits(t *testing.T) {
	t.Parallel()
	db, p, dsn := setUp(t)
	through, err := sqlx.Open("postgres", dsn)
	require.NoError(t, err)
	defer through.Close()
	p.SetRule(pgproxy.AtCommit(pgproxy.CutAfter))
	tx, err := through.Begin()
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO t VALUES ($1)`, 1)
	require.NoError(t, err)
	require.ErrorIs(t, tx.Commit(), driver.ErrBadConn)
	eventuallyCount(t, db, 1)
}

func TestAfterRowsCutsInTheMiddleOfAResult(t *testing.T) {
	t.Parallel()
	_, p, dsn := setUp(t)
	through, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	defer through.Close()
	p.SetRule(pgproxy.OnSQL("generate_series", pgproxy.AfterRows(3)))
	rows, err := through.Query(`SELECT generate_series(1, 1000)`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.Error(t, rows.Err())
	require.Equal(t, 3, n)
}

func TestResetIsAConnectionReset(t *testing.T) {
	t.Parallel()
	_, p, dsn := setUp(t)
	conn := rawConn(t, dsn)
	p.SetRule(pgproxy.OnSQL("select 42", func(ev pgproxy.Event) pgproxy.Action {
		if ev.Dir == pgproxy.FromServer && ev.Type == 'Z' {
			return pgproxy.Reset
		}
		return pgproxy.Forward
	}))
	rows, err := conn.(driver.QueryerContext).QueryContext(context.Background(), `SELECT 42`, nil)
	if err == nil {
		dest := make([]driver.Value, 1)
		for err == nil {
			err = rows.Next(dest)
		}
	}
	require.Error(t, err)
	require.False(t, errors.Is(err, syscall.EPIPE), "reset, not a closed pipe: %v", err)
	require.Equal(t, 1, p.Fired())
}

// A hung connection answers nothing, not even to a cancel (lib/pq waits for the server's
// answer after sending one), until the connection is cut.
func TestHangHoldsTheAnswerUntilCut(t *testing.T) {
	t.Parallel()
	_, p, dsn := setUp(t)
	conn := rawConn(t, dsn) // database/sql would run the SELECT again after the cut
	p.SetRule(pgproxy.OnSQL("pg_sleep", pgproxy.Once(func(ev pgproxy.Event) pgproxy.Action {
		if ev.Dir == pgproxy.FromServer && ev.Type == 'Z' {
			return pgproxy.Hang
		}
		return pgproxy.Forward
	})))
	done := make(chan error, 1)
	go func() {
		done <- exec(conn, `SELECT pg_sleep(0)`)
	}()
	select {
	case err := <-done:
		t.Fatalf("a hung answer came back: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	p.CutAll()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not see the cut")
	}
}

// The same seed over the same messages gives the same faults.
func TestChaosReplaysFromItsSeed(t *testing.T) {
	t.Parallel()
	events := []pgproxy.Event{
		{Dir: pgproxy.FromClient, Type: 'Q'}, {Dir: pgproxy.FromServer, Type: 'C'},
		{Dir: pgproxy.FromServer, Type: 'Z'}, {Dir: pgproxy.FromServer, Type: 'D'},
	}
	run := func(seed uint64) []pgproxy.Action {
		rule := pgproxy.Chaos(seed, 0.3)
		var got []pgproxy.Action
		for i := 0; i < 200; i++ {
			got = append(got, rule(events[i%len(events)]))
		}
		return got
	}
	a, b, c := run(7), run(7), run(8)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
	acted := 0
	for i, x := range a {
		if x != pgproxy.Forward {
			acted++
			require.NotEqual(t, byte('D'), events[i%len(events)].Type, "a DataRow is not a point Chaos acts at")
		}
	}
	require.InDelta(t, 0.3*150, acted, 25)
}

func TestIsChangeTag(t *testing.T) {
	t.Parallel()
	for tag, want := range map[string]bool{
		"INSERT 0 1": true, "UPDATE 3": true, "DELETE 1": true, "COPY 10": true, "MERGE 2": true,
		"UPDATE 0": false, "SELECT 5": false, "COMMIT": false, "BEGIN": false, "INSERT 0 0": false,
	} {
		require.Equal(t, want, pgproxy.IsChangeTag(tag), tag)
	}
}

func TestAnswerLostAfterWriteSeesAWriteInsideAQuery(t *testing.T) {
	t.Parallel()
	db, p, dsn := setUp(t)
	conn := rawConn(t, dsn)
	p.SetRule(pgproxy.AnswerLostAfterWrite())
	require.NoError(t, exec(conn, `WITH x AS (SELECT 1) SELECT * FROM x`))
	require.NoError(t, exec(conn, `UPDATE t SET id = 2`), "UPDATE 0 changed nothing")
	require.Equal(t, 0, p.Fired())
	require.ErrorIs(t, exec(conn, `WITH x AS (INSERT INTO t VALUES (1) RETURNING id) SELECT count(*) FROM x`), driver.ErrBadConn)
	require.Equal(t, 1, p.Fired())
	eventuallyCount(t, db, 1)
}

// A CancelRequest's connection is closed to the client only after the server closes it: the
// client (lib/pq) takes that end as the cancel's delivery and hands its session out again, so
// a proxy that closed first let a late cancel hit the session's next statement. The server
// here is a listener that closes 300 ms after reading the request.
func TestCancelRequestEndsWhenTheServerEndsIt(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	const serverHolds = 300 * time.Millisecond
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 16)
		_, _ = io.ReadFull(c, buf)
		got <- buf
		time.Sleep(serverHolds)
	}()
	p := pgproxy.Start(t, ln.Addr().String())

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	req := make([]byte, 16)
	binary.BigEndian.PutUint32(req[0:], 16)
	binary.BigEndian.PutUint32(req[4:], 80877102) // CancelRequest
	binary.BigEndian.PutUint32(req[8:], 4242)     // the backend's process id
	binary.BigEndian.PutUint32(req[12:], 17)      // its secret key
	start := time.Now()
	_, err = c.Write(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, c)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), serverHolds, "the proxy closed before the server did")
	require.Equal(t, req, <-got, "the request reached the server as sent")
}

package pgrun

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net/url"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// proxiedPool is a pool that opens its sessions through Connector and a fault-injecting proxy,
// with a direct handle on the same database to look at what really happened.
func proxiedPool(t *testing.T) (through *sqlx.DB, direct *sqlx.DB, p *pgproxy.Proxy) {
	t.Helper()
	direct, dsn := pgtest.Open(t)
	_, err := direct.Exec(`CREATE TABLE outcome_probe (k integer)`)
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p = pgproxy.Start(t, u.Host)
	pc, err := pq.NewConnector(p.DSN(t, dsn))
	require.NoError(t, err)
	through = sqlx.NewDb(sql.OpenDB(Connector(pc, time.Second)), "postgres")
	t.Cleanup(func() { _ = through.Close() })
	require.NoError(t, through.Ping())
	return through, direct, p
}

func outcomeRows(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM outcome_probe`))
	return n
}

// The fault database/sql hides: an autocommit write commits, its answer is lost, and lib/pq's
// driver.ErrBadConn would make database/sql send it again. Through Connector it is sent once
// and reported as ErrOutcomeUnknown, for Exec and for a write read as rows.
func TestAutocommitWriteWhoseAnswerIsLostIsNotSentAgain(t *testing.T) {
	t.Parallel()
	through, direct, p := proxiedPool(t)
	p.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
	_, err := through.Exec(`INSERT INTO outcome_probe VALUES ($1)`, 1)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, driver.ErrBadConn)
	require.Equal(t, 1, outcomeRows(t, direct))

	p.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
	var k int
	err = through.Get(&k, `INSERT INTO outcome_probe VALUES (2) RETURNING k`)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Equal(t, 2, outcomeRows(t, direct))

	// A prepared write, as the claim is, the same.
	stmt, err := through.Preparex(`UPDATE outcome_probe SET k = k + 10 RETURNING k`)
	require.NoError(t, err)
	defer stmt.Close()
	p.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
	var ks []int
	require.ErrorIs(t, stmt.Select(&ks), ErrOutcomeUnknown)
	var sum int
	require.NoError(t, direct.Get(&sum, `SELECT sum(k) FROM outcome_probe`))
	require.Equal(t, 1+2+20, sum, "the UPDATE ran exactly once")
	require.Equal(t, 3, p.Fired())
}

// A read whose answer is lost before its rows is run again: it changes nothing.
func TestReadWhoseAnswerIsLostIsRunAgain(t *testing.T) {
	t.Parallel()
	through, _, p := proxiedPool(t)
	p.SetRule(pgproxy.Once(pgproxy.OnSQL("select 7", func(ev pgproxy.Event) pgproxy.Action {
		if ev.Dir == pgproxy.FromServer && ev.Type == 'T' { // RowDescription
			return pgproxy.CutBefore
		}
		return pgproxy.Forward
	})))
	var v int
	require.NoError(t, through.Get(&v, `SELECT 7`))
	require.Equal(t, 7, v)
	require.Equal(t, 1, p.Fired())
}

// A pooled session that the server ended while it sat idle is found dead before anything is
// written to it, so a write on it is sent once, on another session, and succeeds.
func TestStalePooledSessionIsReplacedBeforeAWrite(t *testing.T) {
	t.Parallel()
	through, direct, p := proxiedPool(t)
	through.SetMaxIdleConns(4)
	_, err := through.Exec(`INSERT INTO outcome_probe VALUES (1)`)
	require.NoError(t, err)
	p.CutAll()
	// Let the FIN reach the client's socket.
	time.Sleep(50 * time.Millisecond)
	_, err = through.Exec(`INSERT INTO outcome_probe VALUES (2)`)
	require.NoError(t, err)
	require.Equal(t, 2, outcomeRows(t, direct))
}

// dbNow reads the service's clock, as the repository's reads do.
func dbNow(ctx context.Context, q sqlx.QueryerContext) (time.Time, error) {
	var now time.Time
	err := sqlx.GetContext(ctx, q, &now, `SELECT backfill_now()`)
	return now, err
}

// A read that is sent again when its session is lost (Read) skips that look at the
// socket, and a pooled session the server ended while it sat idle costs it one more attempt,
// not an error.
func TestReadOnAStalePooledSessionIsSentAgain(t *testing.T) {
	t.Parallel()
	through, _, p := proxiedPool(t)
	through.SetMaxIdleConns(4)
	s := New(through, Config{ReconnectWait: 2 * time.Second})
	ctx := context.Background()
	_, err := dbNow(ctx, through)
	require.NoError(t, err)
	p.CutAll()
	time.Sleep(50 * time.Millisecond) // let the FIN reach the client's socket
	var now time.Time
	require.NoError(t, s.Read(ctx, func(ctx context.Context, q Queryer) (err error) {
		now, err = dbNow(ctx, q)
		return err
	}))
	require.False(t, now.IsZero())
}

// COMMIT sent and its answer lost: ErrOutcomeUnknown, not run again, committed once.
func TestCommitWhoseAnswerIsLostIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	through, direct, p := proxiedPool(t)
	s := New(through, Config{ReconnectWait: time.Second})
	p.SetRule(pgproxy.Once(pgproxy.AtCommit(pgproxy.CutAfter)))
	err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		_, err := tx.Exec(`INSERT INTO outcome_probe VALUES (1)`)
		return err
	})
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Eventually(t, func() bool { return outcomeRows(t, direct) == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 1, outcomeRows(t, direct))
}

// A session lost inside a transaction, before COMMIT: the transaction is run again whole and
// commits once.
func TestSessionLostBeforeCommitIsRunAgainWhole(t *testing.T) {
	t.Parallel()
	through, direct, p := proxiedPool(t)
	s := New(through, Config{ReconnectWait: 2 * time.Second})
	p.SetRule(pgproxy.Once(pgproxy.OnSQL("insert into outcome_probe", func(ev pgproxy.Event) pgproxy.Action {
		if ev.Dir == pgproxy.FromServer && ev.Type == 'Z' {
			return pgproxy.CutBefore
		}
		return pgproxy.Forward
	})))
	err := s.Tx(context.Background(), sql.LevelReadCommitted, func(tx *sqlx.Tx) error {
		_, err := tx.Exec(`INSERT INTO outcome_probe VALUES (1)`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 1, p.Fired())
	require.Equal(t, 1, outcomeRows(t, direct))
}

func TestIsRead(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT 1":                            true,
		"\n\t  select * from t":               true,
		"-- why\nSELECT 1":                    true,
		"(SELECT 1) UNION (SELECT 2)":         true,
		"WITH x AS (UPDATE t SET a=1) SELECT": false,
		"INSERT INTO t VALUES (1)":            false,
		"UPDATE t SET a = 1":                  false,
		"DELETE FROM t":                       false,
		"selectx":                             false,
	} {
		require.Equal(t, want, isRead(q), q)
	}
}

// COPY FROM STDIN goes through a statement that lib/pq gives only context-free methods; the
// connector's statement wrapper must still run it (large creations stream their runs this way).
func TestCopyInRunsThroughConnector(t *testing.T) {
	t.Parallel()
	through, direct, _ := proxiedPool(t)
	tx, err := through.Begin()
	require.NoError(t, err)
	st, err := tx.Prepare(`COPY outcome_probe (k) FROM STDIN`)
	require.NoError(t, err)
	for k := range 3 {
		_, err = st.Exec(k)
		require.NoError(t, err)
	}
	_, err = st.Exec()
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.NoError(t, tx.Commit())
	require.Equal(t, 3, outcomeRows(t, direct))
}

// Behind a transaction pooler no cancel request is sent (PgBouncer before 1.20 can exit on
// one): a statement whose context ends runs to its end, and only then does the call return.
// Through Connector the same statement is cancelled at once.
func TestConnectorBehindPoolerSendsNoCancelRequest(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Open(t)
	const sleep = 2 * time.Second
	for _, tc := range []struct {
		name      string
		connector func(driver.Connector, time.Duration) driver.Connector
		cancelled bool
	}{
		{"Connector", Connector, true},
		{"ConnectorBehindPooler", ConnectorBehindPooler, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pc, err := pq.NewConnector(dsn)
			require.NoError(t, err)
			db := sql.OpenDB(tc.connector(pc, time.Second))
			t.Cleanup(func() { _ = db.Close() })
			require.NoError(t, db.Ping())
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = db.ExecContext(ctx, `SELECT pg_sleep($1)`, sleep.Seconds())
			elapsed := time.Since(start)
			if tc.cancelled {
				require.Error(t, err, "the context ended first")
				require.Less(t, elapsed, sleep*3/4, "a cancel request stops the statement")
			} else {
				// Its answer arrives, and lib/pq then closes the session.
				require.GreaterOrEqual(t, elapsed, sleep, "no cancel request: the statement ran to its end (%v)", err)
			}
		})
	}
}

// A read outside any transaction whose session dies mid-answer (a connection reset, as when
// the primary is killed) is sent again on a new session by Read; bare, it fails.
func TestReadOutsideATransactionRidesALostSession(t *testing.T) {
	t.Parallel()
	through, _, p := proxiedPool(t)
	s := New(through, Config{ReconnectWait: 2 * time.Second})
	resetMidAnswer := func() pgproxy.Rule {
		return pgproxy.Once(pgproxy.OnSQL("select backfill_now()", func(ev pgproxy.Event) pgproxy.Action {
			if ev.Dir == pgproxy.FromServer && ev.Type == 'D' { // DataRow
				return pgproxy.Reset
			}
			return pgproxy.Forward
		}))
	}
	ctx := context.Background()
	p.SetRule(resetMidAnswer())
	_, err := dbNow(ctx, through)
	require.Error(t, err, "the fault bites a bare read")
	require.Equal(t, 1, p.Fired())

	p.SetRule(resetMidAnswer())
	var now time.Time
	require.NoError(t, s.Read(ctx, func(ctx context.Context, q Queryer) (err error) {
		now, err = dbNow(ctx, q)
		return err
	}))
	require.False(t, now.IsZero())
	require.Equal(t, 2, p.Fired(), "the fault bit the retried read too, once")
}

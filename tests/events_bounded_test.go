package tests

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// fillOutbox writes n events of no backfill (DAG "history", every 100,000th a
// backfill.failed, the rest backfill.updated) after everything stored so far, in one
// set-based INSERT, and answers the last id. An event's id carries its writer's transaction
// id (migrations/00014), and a transaction writes 4,096 at most: the fixture takes the ids of
// transactions that it first runs and ends empty, so they sort after every event and every
// backfill's bound before them (migrations/00022), below the horizon of every reader.
func fillOutbox(t testing.TB, db *sqlx.DB, n int) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var first int64
	require.NoError(t, conn.GetContext(ctx, &first, `SELECT pg_current_xact_id()::text::bigint`))
	for range n>>12 + 1 {
		_, err := conn.ExecContext(ctx, `SELECT pg_current_xact_id()`)
		require.NoError(t, err)
	}
	tx, err := conn.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO outbox (id, type, backfill_id, dag_id, occurred_at, data)
		SELECT ($1::bigint << 12) + g,
			CASE WHEN g % 100000 = 99999 THEN 'backfill.failed' ELSE 'backfill.updated' END,
			-1, 'history', backfill_now(), '{"backfill": {}}'
		FROM generate_series(0, $2 - 1) g`, first, n)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return first<<12 + int64(n) - 1
}

// A page of GET /events whose filters match nothing in a large outbox answers within the
// statement timeout, empty, with next_after past the rows it looked at; a reader that
// follows next_after reaches the end of the outbox, each request within the timeout. Before
// pages were bounded, one such request read and rendered every event (65–68 s at a million).
func TestEventPageOfAFilterThatMatchesNothingEndsWithinTheStatementTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	e := newEnv(t, withStatementTimeout(timeout))
	last := fillOutbox(t, e.DB, 200_000)

	for _, filter := range []string{"dag_id=nosuchdag", "type=backfill.canceled"} {
		after, requests, stalled := int64(0), 0, 0
		for after < last {
			start := time.Now()
			p := evList(e, fmt.Sprintf("%s&after=%d&limit=10", filter, after))
			took := time.Since(start)
			requests++
			require.Empty(t, p.Events, filter)
			require.Less(t, took, timeout, "%s: request %d (after %d) within the statement timeout", filter, requests, after)
			require.GreaterOrEqual(t, p.NextAfter, after, filter)
			if p.NextAfter == after {
				// Held back: a transaction of another database (a parallel test's) ended
				// while the horizon was read, and counted. A reader asks again.
				stalled++
				require.Less(t, stalled, 20, "%s: next_after moves past the rows looked at (%d, last %d)", filter, after, last)
			}
			after = p.NextAfter
		}
		require.Equal(t, last, after, filter)
		t.Logf("%s: the outbox's 200,000 events in %d requests", filter, requests)
	}
}

// While a transaction holds a transaction id, the events committed after it are held back
// from the feed, and JSON pollers of GET /events wait up to a second for them: outside their
// admission slot, so that 20 of them shed no unrelated status read. Before, each waited in
// its slot and status reads got 503 in most tries.
func TestEventPollersWaitingForAnOpenTransactionShedNoStatusRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAdmission(handlers.Admission{MaxInFlight: 8, Wait: 100 * time.Millisecond, LongWait: time.Second}))
	b := e.DailyBackfill("polled", day(1, 1), day(1, 3))
	after := evList(e, "").NextAfter

	tx := e.DB.MustBegin()
	defer func() { _ = tx.Rollback() }()
	tx.MustExec(`SELECT pg_current_xact_id()`) // holds the horizon from here
	e.PatchBackfill(b.Id, map[string]any{"description": "held back"})

	const pollers = 20
	deadline := time.Now().Add(3 * time.Second)
	var polls, pollsShed, reads, shed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, pollers+1)
	for range pollers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				res, err := e.do(http.MethodGet, fmt.Sprintf("/api/v1/events?after=%d", after), nil)
				if err != nil {
					errs <- err
					return
				}
				polls.Add(1)
				if res.Status == http.StatusServiceUnavailable {
					pollsShed.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(deadline) {
			res, err := e.do(http.MethodGet, backfillPath(b.Id), nil)
			if err != nil {
				errs <- err
				return
			}
			reads.Add(1)
			if res.Status != http.StatusOK {
				shed.Add(1)
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d polls (%d shed), %d status reads (%d not 200)", polls.Load(), pollsShed.Load(), reads.Load(), shed.Load())
	require.Positive(t, reads.Load())
	require.Zero(t, shed.Load(), "status reads shed beside pollers waiting for an open transaction")

	require.NoError(t, tx.Rollback())
	require.NotEmpty(t, evList(e, fmt.Sprintf("after=%d", after)).Events, "the held event is served once the transaction ends")
}

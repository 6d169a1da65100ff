package repo

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fanOutFixture is a Store on a fresh migrated database with one webhook that takes every
// event type.
type fanOutFixture struct {
	t       *testing.T
	s       *Store
	db      *sqlx.DB
	webhook int64
}

func newFanOutFixture(t *testing.T) *fanOutFixture {
	t.Helper()
	db, _ := pgtest.Open(t)
	s := New(db, Config{})
	w, _, err := s.WebhookCreate(context.Background(), WebhookCreateParams{
		URL: "https://example.com/hook", EventTypes: []string{"backfill.updated"}, Secret: "whsec_x",
	})
	require.NoError(t, err)
	return &fanOutFixture{t: t, s: s, db: db, webhook: w.ID}
}

// writeEvents writes n events in ex's transaction (writeEventsOf).
func (f *fanOutFixture) writeEvents(ex sqlx.ExecerContext, n int) {
	f.t.Helper()
	writeEventsOf(f.t, ex, 1, n)
}

// writeEventsOf writes n events of the backfill in ex's transaction (one of its own for a
// pool), as an event writer does: their ids carry the transaction's id. The backfill need not
// exist.
func writeEventsOf(t *testing.T, ex sqlx.ExecerContext, backfillID int64, n int) {
	t.Helper()
	_, err := ex.ExecContext(context.Background(), `
		INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		SELECT 'backfill.updated', $1, 'd', now(), '{}' FROM generate_series(1, $2)`, backfillID, n)
	require.NoError(t, err)
}

// page runs one fan-out page of at most limit events in a transaction of its own and answers
// how many it took, and whether the transaction wrote anything.
func (f *fanOutFixture) page(limit int) (taken int, wrote bool) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(f.t, err)
	defer func() { _ = tx.Rollback() }()
	counts, err := f.s.webhookFanOutPage(ctx, tx, limit)
	require.NoError(f.t, err)
	for _, c := range counts {
		taken += c.Count
	}
	var jit string
	require.NoError(f.t, tx.GetContext(ctx, &jit, `SELECT current_setting('jit')`))
	require.Equal(f.t, "off", jit, "the fan-out's statements are never JIT-compiled")
	require.NoError(f.t, tx.GetContext(ctx, &wrote, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`))
	require.NoError(f.t, tx.Commit())
	return taken, wrote
}

// missing answers how many events have no delivery to the webhook (its primary key allows one
// an event at most).
func (f *fanOutFixture) missing() int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.db.Get(&n, `SELECT count(*) FROM events e WHERE NOT EXISTS (
		SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.webhook_id = $1)`, f.webhook))
	return n
}

// A batch taken in pages smaller than it, while more writers commit between the pages and a
// transaction that began before all of them stays open: every committed event is taken once,
// those that commit during the paging are left to the next batch (not skipped), and the long
// transaction's events are taken when it commits, not held back by it nor lost behind the
// cursor.
func TestWebhookFanOutPagesABatchAndTakesALongTransactionLate(t *testing.T) {
	t.Parallel()
	f := newFanOutFixture(t)
	ctx := context.Background()

	long, err := f.db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = long.Rollback() }()
	f.writeEvents(long, 3) // its id is older than every event below

	for i := range 10 { // 1, 2, 3, 1, 2, 3, 1, 2, 3, 1: 19 events
		f.writeEvents(f.db, 1+i%3)
	}

	var takenInPages int
	for range 2 { // part of the batch: 8 of its 19 events
		n, wrote := f.page(4)
		require.Equal(t, 4, n)
		require.True(t, wrote)
		takenInPages += n
	}
	f.writeEvents(f.db, 2) // commits in the middle of the batch's paging
	for {
		n, _ := f.page(4)
		takenInPages += n
		if n < 4 {
			break
		}
	}
	require.Equal(t, 19, takenInPages, "the batch's own events, once each")
	require.Equal(t, 2, f.missing(), "those that committed while the batch was paged")

	n, _ := f.page(4)
	require.Equal(t, 2, n, "the next batch takes what committed while the last one was paged")
	require.Zero(t, f.missing(), "every committed event (the long transaction's are not yet)")

	n, wrote := f.page(4)
	require.Zero(t, n)
	require.False(t, wrote, "a fan-out with nothing to take writes nothing")

	f.writeEvents(f.db, 1)
	require.NoError(t, long.Commit())
	n, _ = f.page(100)
	require.Equal(t, 1+3, n, "the long transaction's events once it committed, and the newer one")
	require.Zero(t, f.missing())
	var deliveries, events int
	require.NoError(t, f.db.Get(&deliveries, `SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, f.webhook))
	require.NoError(t, f.db.Get(&events, `SELECT count(*) FROM events`))
	require.Equal(t, events, deliveries)
}

// writtenCounter is an Observer that records EventsWritten.
type writtenCounter struct {
	nopObserver
	mu     sync.Mutex
	byType map[string]int
}

func (w *writtenCounter) EventsWritten(eventType string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byType == nil {
		w.byType = map[string]int{}
	}
	w.byType[eventType] += n
}

func (w *writtenCounter) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.byType {
		n += c
	}
	return n
}

// Events are counted by the fan-out that takes them, after it commits: once each over every
// replica, by type, whether the fan-out runs alone or in a delivery claim, and whatever the
// replicas' fan-outs racing each other.
func TestWebhookFanOutCountsEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFanOutFixture(t)
	counters := []*writtenCounter{{}, {}}
	replicas := []*Store{New(f.db, Config{Observer: counters[0]}), New(f.db, Config{Observer: counters[1]})}

	f.writeEvents(f.db, 3)
	require.NoError(t, replicas[0].WebhookFanOut(ctx))
	require.Equal(t, map[string]int{"backfill.updated": 3}, counters[0].byType)
	_, err := f.db.ExecContext(ctx, `INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
		VALUES ('backfill.paused', 1, 'd', now(), '{}'), ('backfill.updated', 1, 'd', now(), '{}')`)
	require.NoError(t, err)
	_, err = replicas[1].WebhookDeliveryClaim(ctx, WebhookClaimParams{
		FanOut: true, PerEndpoint: 1, Limit: 1, Lease: time.Minute, Free: map[int64]int{}})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"backfill.paused": 1, "backfill.updated": 1}, counters[1].byType, "the claim's fan-out counts too")

	// Both replicas fan out at once, each many times, while writers commit.
	const writers, each = 4, 25
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			<-start
			for range each {
				writeEventsOf(t, f.db, int64(w+1), 1)
			}
		})
	}
	for _, r := range replicas {
		wg.Go(func() {
			<-start
			for range 2 * each {
				assert.NoError(t, r.WebhookFanOut(ctx))
			}
		})
	}
	close(start)
	wg.Wait()
	for _, r := range replicas {
		require.NoError(t, r.WebhookFanOut(ctx)) // what committed after the last ones
	}
	var stored int
	require.NoError(t, f.db.Get(&stored, `SELECT count(*) FROM events`))
	require.Equal(t, stored, counters[0].total()+counters[1].total(), "every event counted once over both replicas")
	require.Equal(t, 1, f.missing(), "every event has its delivery but the pause, a type the webhook does not take")
}

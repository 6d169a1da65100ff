package events

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// An event that an older transaction holds back when its notification comes reaches the
// stream soon after that transaction ends, with no other wake-up: no later notification, and
// polls an hour apart. It used to wait for one of them.
func TestHeldEventReachesTheStreamWhenTheOlderTransactionEnds(t *testing.T) {
	t.Parallel()
	db, dsn, store, b := oneBackfill(t)
	ctx := context.Background()

	sub := listeningStream(t, db, dsn, store, b.ID)

	// An older transaction of the database, with a transaction id: events committed after it
	// began are not servable until it ends.
	holder, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)

	_, err = store.BackfillPause(ctx, b.ID)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, notifyStatement)
	require.NoError(t, err)

	paused := func(wait time.Duration) bool { return receives(sub, domain.EventBackfillPaused, wait) }
	// Longer than the read's own wait for held events (heldWait): the hub has given up on
	// this notification's read.
	require.False(t, paused(3*heldWait), "an event is never served while an older transaction may still write one before it")
	require.NoError(t, holder.Commit())
	ended := time.Now()
	require.True(t, paused(5*time.Second), "the pause did not reach the stream within 5 s of the older transaction's end")
	t.Logf("the held event reached the stream %s after the older transaction ended", time.Since(ended).Round(time.Millisecond))
}

// listeningStream starts a hub on store whose polls are an hour apart, so that only
// notifications and its own rereads wake it, and answers a subscription to the backfill once
// the hub listens. The test's cleanup closes both.
func listeningStream(t *testing.T, db *sqlx.DB, dsn string, store Store, backfillID int64) *Subscription {
	t.Helper()
	hub := New(store, Config{DSN: dsn, PollInterval: time.Hour, FallbackPollInterval: time.Hour,
		ProgressInterval: 20 * time.Millisecond})
	require.NoError(t, hub.Start(context.Background()))
	t.Cleanup(hub.Stop)
	sub, err := hub.Subscribe(backfillID)
	require.NoError(t, err)
	t.Cleanup(sub.Close)
	require.Eventually(t, func() bool { return listenSessions(t, db) == 1 }, 5*time.Second, 10*time.Millisecond)
	return sub
}

// failingReads is a Store whose next reads of events fail, as a read that times out on a busy
// database does.
type failingReads struct {
	Store
	fail atomic.Int32 // reads still to fail
	made atomic.Int32 // reads answered, failed or not
}

func (f *failingReads) EventPage(ctx context.Context, p repo.EventListParams) ([]domain.Event, bool, error) {
	defer f.made.Add(1)
	for n := f.fail.Load(); n > 0; n = f.fail.Load() {
		if f.fail.CompareAndSwap(n, n-1) {
			return nil, false, errors.New("read failed")
		}
	}
	return f.Store.EventPage(ctx, p)
}

// A read of the outbox that fails is made again soon, with no other wake-up: the event its
// notification announced reaches the stream although the next notification and poll are an
// hour away. It used to wait for one of them.
func TestFailedReadIsMadeAgain(t *testing.T) {
	t.Parallel()
	db, dsn, store, b := oneBackfill(t)
	ctx := context.Background()
	reads := &failingReads{Store: store}

	sub := listeningStream(t, db, dsn, reads, b.ID)
	// The read the hub makes as it begins to listen is over: a read under way could still
	// find the pause below without failing (CI, 2026-12-05).
	require.Eventually(t, func() bool { return reads.made.Load() >= 1 }, 5*time.Second, 10*time.Millisecond)

	reads.fail.Store(2)
	_, err := store.BackfillPause(ctx, b.ID)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, notifyStatement)
	require.NoError(t, err)

	require.True(t, receives(sub, domain.EventBackfillPaused, 5*time.Second),
		"the pause did not reach the stream within 5 s of a failed read (reads left to fail: %d)", reads.fail.Load())
	require.LessOrEqual(t, reads.fail.Load(), int32(0), "the failing reads were made")
}

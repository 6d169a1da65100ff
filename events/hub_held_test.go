package events

import (
	"context"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/stretchr/testify/require"
)

// An event that an older transaction holds back when its notification comes reaches the
// stream soon after that transaction ends, with no other wake-up: no later notification, and
// polls an hour apart. It used to wait for one of them.
func TestHeldEventReachesTheStreamWhenTheOlderTransactionEnds(t *testing.T) {
	t.Parallel()
	db, dsn, store, b := oneBackfill(t)
	ctx := context.Background()

	hub := New(store, Config{DSN: dsn, PollInterval: time.Hour, FallbackPollInterval: time.Hour,
		ProgressInterval: 20 * time.Millisecond})
	require.NoError(t, hub.Start(ctx))
	defer hub.Stop()
	sub, err := hub.Subscribe(b.ID)
	require.NoError(t, err)
	defer sub.Close()
	require.Eventually(t, func() bool { return listenSessions(t, db) == 1 }, 5*time.Second, 10*time.Millisecond)

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

	paused := func(wait time.Duration) bool {
		deadline := time.After(wait)
		for {
			select {
			case <-sub.Wake():
				evs, _, _ := sub.Take()
				for _, ev := range evs {
					if ev.Type == domain.EventBackfillPaused {
						return true
					}
				}
			case <-deadline:
				return false
			}
		}
	}
	// Longer than the read's own wait for held events (heldWait): the hub has given up on
	// this notification's read.
	require.False(t, paused(3*heldWait), "an event is never served while an older transaction may still write one before it")
	require.NoError(t, holder.Commit())
	ended := time.Now()
	require.True(t, paused(5*time.Second), "the pause did not reach the stream within 5 s of the older transaction's end")
	t.Logf("the held event reached the stream %s after the older transaction ended", time.Since(ended).Round(time.Millisecond))
}

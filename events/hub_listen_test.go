package events

import (
	"context"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// A replica listens while it has streams and ListenIdle after the last one, then lets the
// session go: listening, it reads the outbox on every notification, so a replica that once
// had a stream read it up to a hundred times a second under steady changes for the rest of its
// life. A stream that opens later listens again, and its events come on notifications.
func TestListenSessionEndsAfterTheLastStream(t *testing.T) {
	t.Parallel()
	db, dsn, store, b := oneBackfill(t)
	ctx := context.Background()

	const idle, tick = 400 * time.Millisecond, 20 * time.Millisecond
	// No poll within the test: what reaches the second stream came on a notification.
	hub := New(store, Config{DSN: dsn, PollInterval: time.Hour, FallbackPollInterval: time.Hour,
		ProgressInterval: tick, ListenIdle: idle})
	require.NoError(t, hub.Start(ctx))
	defer hub.Stop()

	first, err := hub.Subscribe(b.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return listenSessions(t, db) == 1 }, 5*time.Second, 10*time.Millisecond,
		"a replica with a stream listens")
	closed := time.Now()
	first.Close()
	require.Eventually(t, func() bool { return listenSessions(t, db) == 0 }, 5*time.Second, 10*time.Millisecond,
		"the session ends after the last stream")
	require.GreaterOrEqual(t, time.Since(closed), idle, "not before ListenIdle")

	second, err := hub.Subscribe(b.ID)
	require.NoError(t, err)
	defer second.Close()
	require.Eventually(t, func() bool { return listenSessions(t, db) == 1 }, 5*time.Second, 10*time.Millisecond,
		"a stream that opens later listens again")
	_, err = store.BackfillPause(ctx, b.ID)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, notifyStatement)
	require.NoError(t, err)
	require.True(t, receives(second, domain.EventBackfillPaused, 5*time.Second),
		"the pause did not reach the stream within 5 s, with polls an hour apart")
}

// receives says whether an event of the type reaches the subscription within wait.
func receives(sub *Subscription, typ domain.EventType, wait time.Duration) bool {
	deadline := time.After(wait)
	for {
		select {
		case <-sub.Wake():
			evs, _, _ := sub.Take()
			for _, ev := range evs {
				if ev.Type == typ {
					return true
				}
			}
		case <-deadline:
			return false
		}
	}
}

// oneBackfill opens a scratch database with a store and one backfill of one run in it.
func oneBackfill(t *testing.T) (*sqlx.DB, string, *repo.Store, repo.Backfill) {
	t.Helper()
	db, dsn := pgtest.Open(t)
	store := repo.New(db, repo.Config{})
	return db, dsn, store, newBackfill(t, store, "one")
}

// newBackfill makes a DAG and a backfill of one run of it.
func newBackfill(t *testing.T, store *repo.Store, dagID string) repo.Backfill {
	t.Helper()
	ctx := context.Background()
	_, _, err := store.DagPut(ctx, repo.DagPutParams{DagID: dagID, Schedule: "@daily", Timezone: "UTC", MaxActiveRuns: 1})
	require.NoError(t, err)
	b, _, err := store.BackfillCreate(ctx, domain.BackfillRequest{DagID: dagID,
		FromDate: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), ToDate: time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC),
		ReprocessBehavior: "none", MaxActiveRuns: 1})
	require.NoError(t, err)
	return b
}

// listenSessions counts the sessions of the test's database whose last statement was LISTEN.
func listenSessions(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`))
	return n
}

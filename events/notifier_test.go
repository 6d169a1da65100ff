package events

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A refused notification leaves its session as it found it. pg_notify is refused here by a
// missing privilege, as a standby refuses it during a failover; the session that sent it
// then serves the next statement instead of answering "current transaction is aborted"
// (25P02), which it did for as long as it stayed pooled.
func TestRefusedNotificationLeavesItsSessionUsable(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	ctx := context.Background()
	// Function privileges belong to the database: this scratch one only.
	_, err := db.ExecContext(ctx, `REVOKE EXECUTE ON FUNCTION pg_notify(text, text) FROM PUBLIC`)
	require.NoError(t, err)
	conn, err := db.Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET ROLE pg_monitor`) // a role without the privilege
	require.NoError(t, err)

	_, err = conn.ExecContext(ctx, notifyStatement)
	require.ErrorContains(t, err, "permission denied for function pg_notify")
	var inBlock bool
	require.NoError(t, conn.GetContext(ctx, &inBlock, `SELECT now() <> statement_timestamp()`),
		"the session serves the next statement")
	require.False(t, inBlock, "the session is not left inside a transaction block")
}

// A notification that fails is sent again until one goes through, with no other kick: a hub
// behind a working LISTEN would otherwise learn of the change only at its next poll.
func TestFailedNotificationIsSentAgain(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	sent := make(chan struct{})
	n := NewNotifier(func(context.Context, string) error {
		if calls.Add(1) <= 3 {
			return errors.New("refused")
		}
		close(sent)
		return nil
	}, time.Millisecond, nil)
	require.NoError(t, n.Start(context.Background()))
	defer n.Stop()

	n.Kick()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification went through within 5 s (%d attempts)", calls.Load())
	}
	time.Sleep(50 * time.Millisecond)
	require.EqualValues(t, 4, calls.Load(), "three failures, one success, and nothing after it without a kick")
}

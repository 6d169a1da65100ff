package events

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// gatedStore holds the hub's next read of the outbox at a gate once armed, so that a test can
// open a stream and commit an event while a read that began before the stream is under way.
type gatedStore struct {
	*repo.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGatedStore(s *repo.Store) *gatedStore {
	return &gatedStore{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedStore) gate() {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
}

func (g *gatedStore) EventLastID(ctx context.Context) (int64, error) {
	g.gate()
	return g.Store.EventLastID(ctx)
}

func (g *gatedStore) EventPage(ctx context.Context, p repo.EventListParams) ([]domain.Event, bool, error) {
	g.gate()
	return g.Store.EventPage(ctx, p)
}

// A stream that subscribes while a read of the hub is under way, a read that began without
// its backfill, is not handed the events of its backfill that read finds: its replay may have
// come before they could be served, so it is told to read them from the outbox (lagged).
// Before, the read dropped them, and the stream waited for an event it never got (CI,
// 2026-12-04: a pause, in TestEventStreamPollingFallback).
func TestStreamThatSubscribesDuringARead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// otherStream: another backfill has a stream when the read begins, so the read
		// fetches events (without data for the newcomer's backfill) instead of skipping to the end.
		otherStream bool
	}{{"while the replica skipped to the outbox's end", false}, {"while the replica read another backfill's events", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, store, b := oneBackfill(t)
			ctx := context.Background()
			gated := newGatedStore(store)
			hub := New(gated, Config{PollInterval: 20 * time.Millisecond, ProgressInterval: time.Hour})
			require.NoError(t, hub.Start(ctx))
			defer hub.Stop()
			if tc.otherStream {
				otherSub, err := hub.Subscribe(newBackfill(t, store, "other").ID)
				require.NoError(t, err)
				defer otherSub.Close()
			}

			gated.armed.Store(true)
			<-gated.entered // a read has begun, without the newcomer
			sub, err := hub.Subscribe(b.ID)
			require.NoError(t, err)
			defer sub.Close()
			// The stream's replay would come here, before the pause is committed.
			_, err = store.BackfillPause(ctx, b.ID)
			require.NoError(t, err)
			close(gated.release)

			select {
			case <-sub.Wake():
			case <-time.After(5 * time.Second):
				t.Fatal("the stream was told nothing of its backfill's pause")
			}
			evs, lagged, _ := sub.Take()
			require.True(t, lagged || len(evs) > 0, "the stream gets the pause, or is told to read it from the outbox")
		})
	}
}

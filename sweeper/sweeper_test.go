package sweeper

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// passLog records when each pass started (its end less the duration OnPass is told).
type passLog struct {
	mu     sync.Mutex
	starts []time.Time
	errs   []error
}

func (p *passLog) onPass(d time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts = append(p.starts, time.Now().Add(-d))
	p.errs = append(p.errs, err)
}

func (p *passLog) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.starts)
}

func (p *passLog) snapshot() ([]time.Time, []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.starts...), append([]error(nil), p.errs...)
}

// sweepDB is a fresh migrated database with its clock stopped at now.
func sweepDB(t *testing.T, now time.Time) (*sqlx.DB, *repo.Store) {
	t.Helper()
	db, _ := pgtest.Open(t)
	require.NoError(t, pgtest.SetClock(context.Background(), db, now))
	return db, repo.New(db, repo.Config{})
}

func insertKey(t *testing.T, db *sqlx.DB, key string, createdAt time.Time) {
	t.Helper()
	_, err := db.Exec(`INSERT INTO idempotency_keys (key, operation, request_hash, result_ids, created_at)
		VALUES ($1, 'claim', 'hash', '{}', $2)`, key, createdAt)
	require.NoError(t, err)
}

func keyExists(t *testing.T, db *sqlx.DB, key string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM idempotency_keys WHERE key = $1`, key))
	return n == 1
}

// TestPassRunsAtStartThenOnItsInterval: the first pass prunes a stale key at once; a key that
// becomes stale afterwards is pruned by a later pass, with no further Start; passes are spaced
// by the interval, not run back to back.
func TestPassRunsAtStartThenOnItsInterval(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	db, store := sweepDB(t, now)
	insertKey(t, db, "stale", now.Add(-2*time.Hour))
	insertKey(t, db, "fresh", now.Add(-30*time.Minute))

	const interval = 100 * time.Millisecond
	var log passLog
	s := New(store, Config{Interval: interval, IdempotencyKeyTTL: time.Hour, OnPass: log.onPass})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop()

	require.Eventually(t, func() bool { return log.count() >= 1 }, 5*time.Second, 5*time.Millisecond)
	require.False(t, keyExists(t, db, "stale"), "the first pass runs at Start")
	require.True(t, keyExists(t, db, "fresh"))

	// An hour later "fresh" is 90 minutes old: only a pass on the interval can prune it.
	require.NoError(t, pgtest.SetClock(context.Background(), db, now.Add(time.Hour)))
	require.Eventually(t, func() bool { return !keyExists(t, db, "fresh") }, 5*time.Second, 10*time.Millisecond)

	require.Eventually(t, func() bool { return log.count() >= 4 }, 5*time.Second, 10*time.Millisecond)
	s.Stop()
	starts, errs := log.snapshot()
	for i, err := range errs {
		if i == len(errs)-1 && errors.Is(err, context.Canceled) {
			continue // the pass that Stop cut short
		}
		require.NoError(t, err, "pass %d", i)
	}
	// Passes after the first start on the ticker, which never delivers a tick early (a slow
	// pass can make the next one start at once, on a tick that came while it ran, but not
	// make ticks more frequent): over any span there are at most span/interval + 1 of them.
	span := starts[len(starts)-1].Sub(starts[0])
	require.LessOrEqual(t, len(starts)-1, int(span/interval)+1,
		"%d passes after the first in %s: more often than every %s", len(starts)-1, span, interval)
}

// TestStopEndsTheLoop: Stop is safe before Start and idempotent, no pass runs after Stop
// returns, and Start after Stop runs a pass at once again.
func TestStopEndsTheLoop(t *testing.T) {
	_, store := sweepDB(t, time.Now())
	const interval = 20 * time.Millisecond
	var log passLog
	s := New(store, Config{Interval: interval, OnPass: log.onPass})
	s.Stop() // before Start

	require.NoError(t, s.Start(context.Background()))
	require.NoError(t, s.Start(context.Background()), "a second Start while running is a no-op")
	require.Eventually(t, func() bool { return log.count() >= 2 }, 5*time.Second, 5*time.Millisecond)
	s.Stop()
	s.Stop()
	require.False(t, s.Running())
	stopped := log.count()
	time.Sleep(5 * interval)
	require.Equal(t, stopped, log.count(), "a pass ran after Stop returned")

	require.NoError(t, s.Start(context.Background()))
	require.Eventually(t, func() bool { return log.count() > stopped }, 5*time.Second, 5*time.Millisecond)
	s.Stop()
}

// blockingStore holds the first step of a pass until the pass's context ends, then records
// that it returned.
type blockingStore struct {
	Store
	entered  chan struct{}
	returned atomic.Bool
}

func (b *blockingStore) SweepExpireLeases(ctx context.Context, _ int) (int, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	time.Sleep(20 * time.Millisecond) // a step that takes a moment to give up
	b.returned.Store(true)
	return 0, ctx.Err()
}

// TestStopWaitsForThePassInFlight: Stop cancels a pass in flight and returns only once it has
// ended; the cancelled pass is not logged as a failure (OnPass still hears of it).
func TestStopWaitsForThePassInFlight(t *testing.T) {
	_, store := sweepDB(t, time.Now())
	b := &blockingStore{Store: store, entered: make(chan struct{}, 1)}
	var log passLog
	s := New(b, Config{Interval: time.Hour, OnPass: log.onPass})
	require.NoError(t, s.Start(context.Background()))
	select {
	case <-b.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first pass did not start")
	}
	s.Stop()
	require.True(t, b.returned.Load(), "Stop returned before the pass in flight ended")
	require.Equal(t, 1, log.count())
	_, errs := log.snapshot()
	require.ErrorIs(t, errs[0], context.Canceled)
}

// TestStopRunsNoPassAfterTheOneItCut: a pass that outlasts the interval leaves a tick
// ready when Stop cancels it; the loop ends there instead of starting another pass on the
// cancelled context (which OnPass would count as one more failed pass). Each cycle of Start
// and Stop makes exactly one pass; with the tick chosen at random half the time, 20 cycles
// would show an extra pass all but certainly.
func TestStopRunsNoPassAfterTheOneItCut(t *testing.T) {
	_, store := sweepDB(t, time.Now())
	b := &blockingStore{Store: store, entered: make(chan struct{}, 1)}
	var log passLog
	s := New(b, Config{Interval: time.Millisecond, OnPass: log.onPass})
	const cycles = 20
	for i := range cycles {
		require.NoError(t, s.Start(context.Background()))
		select {
		case <-b.entered:
		case <-time.After(5 * time.Second):
			t.Fatalf("cycle %d: the pass did not start", i)
		}
		// The blocked pass outlasts several intervals: a tick is waiting when Stop cancels.
		time.Sleep(5 * time.Millisecond)
		s.Stop()
		require.Equal(t, i+1, log.count(), "cycle %d: a pass ran after the one Stop cut short", i)
	}
	_, errs := log.snapshot()
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "pass %d", i)
	}
}

// TestCancelledParentEndsTheLoop: the context given to Start bounds the loop too.
func TestCancelledParentEndsTheLoop(t *testing.T) {
	_, store := sweepDB(t, time.Now())
	s := New(store, Config{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	require.True(t, s.Running())
	cancel()
	require.Eventually(t, func() bool { return !s.Running() }, 5*time.Second, 5*time.Millisecond)
	s.Stop()
}

func TestNewAppliesTheExportedDefaults(t *testing.T) {
	s := New(nil, Config{})
	require.Equal(t, DefaultInterval, s.cfg.Interval)
	require.Equal(t, DefaultBatch, s.cfg.Batch)
	require.Equal(t, DefaultMaxBatches, s.cfg.MaxBatches)
	require.Equal(t, DefaultBatchTimeout, s.cfg.BatchTimeout)
	require.Equal(t, DefaultIdempotencyKeyTTL, s.cfg.IdempotencyKeyTTL)
	require.Equal(t, DefaultEventTTL, s.cfg.EventTTL)
}

// Package sweeper drives backfills to completion in the background: each pass expires
// leases, finalizes backfills whose runs are all finished, prunes idempotency keys past their
// retention, keeps the outbox's partitions (dropping whole ones past the events' retention)
// and prunes deleted backfills' bounds past theirs, each step in bounded batches of short
// transactions (the repository's Sweep* methods, through the Store interface
// declared here). Every replica runs one; the repository's row locks with SKIP LOCKED make
// concurrent passes safe, and a pass that meets a row held past LOCK_WAIT leaves it to the
// next.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backfillsvc/backfill/internal/defaults"
	"github.com/backfillsvc/backfill/internal/startstop"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/tracing"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config, exported so that the service's configuration reuses them.
const (
	DefaultInterval          = 5 * time.Second
	DefaultBatch             = 500
	DefaultMaxBatches        = 100
	DefaultBatchTimeout      = 30 * time.Second
	DefaultIdempotencyKeyTTL = 24 * time.Hour     // the contract's minimum
	DefaultEventTTL          = 7 * 24 * time.Hour // the contract's minimum
)

// Store is what a pass needs from the repository.
type Store interface {
	SweepExpireLeases(ctx context.Context, batch int) (int, error)
	SweepFinalize(ctx context.Context, batch int) (int, error)
	SweepFinalizeGroups(ctx context.Context, batch int) (int, error)
	SweepPruneIdempotencyKeys(ctx context.Context, maxAge time.Duration, batch int) (int, error)
	SweepEventPartitions(ctx context.Context, p repo.EventPartitionParams) (repo.EventPartitionsPass, error)
	SweepPruneDeletedBackfills(ctx context.Context, maxAge time.Duration, batch int) (int, error)
}

// Config tunes a Sweeper. Zero values take defaults.
type Config struct {
	// Interval between passes (default 5s).
	Interval time.Duration
	// Batch is the most rows one short transaction touches (default 500).
	Batch int
	// MaxBatches bounds the batches of one step in one pass (default 100), so a huge backlog
	// is worked off over several passes instead of one unbounded one.
	MaxBatches int
	// BatchTimeout bounds each transaction (default 30s).
	BatchTimeout time.Duration
	// IdempotencyKeyTTL is how long idempotency keys are kept (default 24h, the contract's
	// minimum).
	IdempotencyKeyTTL time.Duration
	// EventTTL is how long lifecycle events are kept (default 7 days, the contract's minimum).
	EventTTL time.Duration
	// EventPartitionSpan is how long a new partition of the outbox is meant to last
	// (repo.DefaultEventPartitionSpan when zero).
	EventPartitionSpan time.Duration
	Logger             *slog.Logger
	// OnPass, when set, is told the duration and outcome of every pass (for metrics).
	OnPass func(d time.Duration, err error)
	// Tracer records a span per pass, its transactions under it; nil is off.
	Tracer *tracing.Tracer
}

// Sweeper is a start/stop background service: Start spawns the loop (one pass at once, then
// one per interval; a second Start while it runs is a no-op), Stop ends it and waits for it
// (idempotent, safe before Start).
type Sweeper struct {
	startstop.Base

	store Store
	cfg   Config
	log   *slog.Logger
}

// New returns a stopped Sweeper.
func New(store Store, cfg Config) *Sweeper {
	defaults.Positive(&cfg.Interval, DefaultInterval)
	defaults.Positive(&cfg.Batch, DefaultBatch)
	defaults.Positive(&cfg.MaxBatches, DefaultMaxBatches)
	defaults.Positive(&cfg.BatchTimeout, DefaultBatchTimeout)
	defaults.Positive(&cfg.IdempotencyKeyTTL, DefaultIdempotencyKeyTTL)
	defaults.Positive(&cfg.EventTTL, DefaultEventTTL)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sweeper{store: store, cfg: cfg, log: cfg.Logger}
	s.Init(s.loop, nil)
	return s
}

func (s *Sweeper) loop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		start := time.Now()
		err := s.RunOnce(ctx)
		if s.cfg.OnPass != nil {
			s.cfg.OnPass(time.Since(start), err)
		}
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, repo.ErrLockWait):
			// A row or table another transaction held past LOCK_WAIT (an operator's LOCK
			// TABLE, a migration): the next pass takes it up, nothing is wrong here.
			s.log.Warn("sweep pass met a held lock; the next pass goes on", "err", err)
		default:
			s.log.Error("sweep pass failed", "err", err)
		}
		// select picks at random among ready cases: a tick that came while the pass ran is
		// ready beside a Stop's cancel, and would start a pass that only fails with the
		// context's error (counted as a failed pass) and another chance to choose it again.
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// RunOnce runs one pass: expire leases, then finalize backfills (so that a run failed by its
// last expiry lets its backfill finish in the same pass) and the groups whose members all
// finished, then prune idempotency keys past their retention, keep the outbox's partitions
// (one ahead, whole ones dropped past the events' retention), and prune deleted backfills'
// bounds past theirs. Each step runs in
// bounded batches of short transactions. With a tracer, the pass is a span over its
// transactions' spans.
func (s *Sweeper) RunOnce(ctx context.Context) (err error) {
	if s.cfg.Tracer != nil {
		var span trace.Span
		ctx, span = s.cfg.Tracer.Start(ctx, "sweep")
		defer func() { s.cfg.Tracer.End(span, err) }()
	}
	return s.runOnce(ctx)
}

func (s *Sweeper) runOnce(ctx context.Context) error {
	expired, err := s.batches(ctx, s.store.SweepExpireLeases)
	if err != nil {
		return fmt.Errorf("expire leases: %w", err)
	}
	finalized, err := s.batches(ctx, s.store.SweepFinalize)
	if err != nil {
		return fmt.Errorf("finalize backfills: %w", err)
	}
	// After the backfills: a group whose last member this pass finished ends in it too.
	groupsFinalized, err := s.batches(ctx, s.store.SweepFinalizeGroups)
	if err != nil {
		return fmt.Errorf("finalize backfill groups: %w", err)
	}
	pruned, err := s.batches(ctx, func(ctx context.Context, batch int) (int, error) {
		return s.store.SweepPruneIdempotencyKeys(ctx, s.cfg.IdempotencyKeyTTL, batch)
	})
	if err != nil {
		return fmt.Errorf("prune idempotency keys: %w", err)
	}
	// The outbox's partitions: the next one ahead of the ids, and whole partitions dropped
	// past the events' retention.
	partitions, err := s.partitionPass(ctx)
	if err != nil {
		return fmt.Errorf("event partitions: %w", err)
	}
	// A deleted backfill's bound is kept while any of its events may be: its last event is
	// older than its deletion, and the events' prune may run late, so twice their retention.
	boundsPruned, err := s.batches(ctx, func(ctx context.Context, batch int) (int, error) {
		return s.store.SweepPruneDeletedBackfills(ctx, 2*s.cfg.EventTTL, batch)
	})
	if err != nil {
		return fmt.Errorf("prune deleted backfills' bounds: %w", err)
	}
	if expired+finalized+groupsFinalized+pruned+boundsPruned+partitions.Created+partitions.Dropped > 0 {
		s.log.Info("sweep pass", "leases_expired", expired, "backfills_finalized", finalized,
			"groups_finalized", groupsFinalized, "keys_pruned", pruned,
			"event_partitions_created", partitions.Created, "event_partitions_dropped", partitions.Dropped,
			"deliveries_of_dropped_events", partitions.DeliveriesDeleted,
			"deleted_backfill_bounds_pruned", boundsPruned)
	}
	return nil
}

// partitionPass runs the outbox partitions' step (repo.Store.SweepEventPartitions) under the
// batch timeout times MaxBatches: a drop may wait for readers of its partition.
func (s *Sweeper) partitionPass(ctx context.Context) (repo.EventPartitionsPass, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BatchTimeout)
	defer cancel()
	return s.store.SweepEventPartitions(ctx, repo.EventPartitionParams{
		Retention: s.cfg.EventTTL, Span: s.cfg.EventPartitionSpan,
	})
}

// batches calls step until it returns a short batch, at most MaxBatches times.
func (s *Sweeper) batches(ctx context.Context, step func(ctx context.Context, batch int) (int, error)) (int, error) {
	total := 0
	for range s.cfg.MaxBatches {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := s.runBatch(ctx, step)
		total += n
		if err != nil {
			return total, err
		}
		if n < s.cfg.Batch {
			return total, nil
		}
	}
	return total, nil
}

func (s *Sweeper) runBatch(ctx context.Context, step func(ctx context.Context, batch int) (int, error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BatchTimeout)
	defer cancel()
	return step(ctx, s.cfg.Batch)
}

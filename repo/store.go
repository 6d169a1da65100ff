// Package repo holds all SQL of the service. Public methods own their transaction; private
// helpers take sqlx.ExtContext so that they compose inside one.
package repo

import (
	"context"
	"fmt"
	"github.com/backfillsvc/backfill/domain"
	"time"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/backfillsvc/backfill/tracing"
	"github.com/jmoiron/sqlx"
)

// Observer is told about events an operator alerts on. The metrics package implements it.
type Observer interface {
	TxRetried()
	BackfillCreated(state string)
	BackfillFinalized(state string)
	RunsClaimed(n int)
	LeasesExpired(n int)
	// RunDeferred: a report deferred a run of the DAG.
	RunDeferred(dagID string)
	// EventsWritten: n events of the type were written to the outbox, counted once, by the
	// replica whose webhook fan-out took them (webhook_fanout.go).
	EventsWritten(eventType string, n int)
}

type nopObserver struct{}

func (nopObserver) TxRetried()                {}
func (nopObserver) BackfillCreated(string)    {}
func (nopObserver) BackfillFinalized(string)  {}
func (nopObserver) RunsClaimed(int)           {}
func (nopObserver) LeasesExpired(int)         {}
func (nopObserver) RunDeferred(string)        {}
func (nopObserver) EventsWritten(string, int) {}

// The service's defaults for Config, stated once: cmd/api's configuration starts from them
// (MAX_BACKFILL_RUNS, MAX_ATTEMPTS) and New falls back to them for a zero value, which tests
// and tools rely on.
const (
	DefaultMaxBackfillRuns    = 100000
	DefaultMaxAttempts        = 3
	DefaultMaxRunDependencies = domain.DefaultMaxRunDependencies
)

// Config tunes a Store. Zero values take DefaultMaxBackfillRuns and DefaultMaxAttempts.
type Config struct {
	// MaxBackfillRuns caps the slots of one backfill.
	MaxBackfillRuns int
	// MaxAttempts is the attempt at which an expired lease fails the run.
	MaxAttempts int
	// Observer receives events for metrics; nil means none.
	Observer Observer
	// ReconnectWait bounds how long a transaction that could not get a usable session
	// (before anything could commit) is run again before giving up (default 5 s).
	ReconnectWait time.Duration
	// LockWait bounds how long a statement waits for a row lock before it fails with
	// ErrLockWait (default DefaultLockWait): a transaction's statements, and the writes made
	// in one statement of their own (statementLockWait).
	LockWait time.Duration
	// OnEvents is called, without blocking, after a change that may have written events
	// (the outbox's writers take no lock and send no NOTIFY: the service wakes the event
	// streams itself, events.Notifier). nil calls nothing.
	OnEvents func()
	// OnClaimable is called, without blocking, after a change that may have made runs
	// claimable (a creation, a report or release, an unpause, a limit raised, a lease
	// expired), to wake waiting claims (events.ClaimWaker). nil calls nothing.
	OnClaimable func()
	// LeaseDB is a small pool of its own for heartbeats, reports and releases, so that they
	// never queue for a connection behind claims or reads; nil uses the main pool.
	LeaseDB *sqlx.DB
	// PrepareStatements prepares the hot statements (status read, claim, report, heartbeat)
	// once per pooled connection (pgrun/prepared.go). Off behind a transaction pooler (DB_POOLER).
	PrepareStatements bool
	// Tracer records a span per transaction or read, named by the Store method; nil is off.
	Tracer *tracing.Tracer
	// PriorityAging is how long a passed-over backfill waits for each point of effective
	// priority in claims (PRIORITY_AGING); zero takes DefaultPriorityAging.
	PriorityAging time.Duration
	// MaxRunDependencies caps the run-to-run dependencies of one group (MAX_RUN_DEPENDENCIES);
	// zero takes domain.DefaultMaxRunDependencies.
	MaxRunDependencies int64
}

// Store is the repository over one connection pool, which only its runtime holds.
type Store struct {
	pg              *pgrun.DB
	observer        Observer
	maxBackfillRuns int
	maxAttempts     int
	onEvents        func()
	onClaimable     func()
	priorityAging   time.Duration
	maxDependencies int64
	leaf            outboxLeaf
}

// DefaultLockWait is how long a statement of a transaction waits for a row lock that another
// transaction holds before the transaction gives up (LOCK_WAIT).
const DefaultLockWait = pgrun.DefaultLockWait

// New returns a Store over db, whose sessions should come from pgrun.Connector.
func New(db *sqlx.DB, cfg Config) *Store {
	s := &Store{
		observer:        cfg.Observer,
		maxBackfillRuns: cfg.MaxBackfillRuns,
		maxAttempts:     cfg.MaxAttempts,
		onEvents:        cfg.OnEvents,
		onClaimable:     cfg.OnClaimable,
		priorityAging:   cfg.PriorityAging,
		maxDependencies: cfg.MaxRunDependencies,
	}
	if s.maxDependencies <= 0 {
		s.maxDependencies = domain.DefaultMaxRunDependencies
	}
	if s.priorityAging <= 0 {
		s.priorityAging = DefaultPriorityAging
	}
	if s.observer == nil {
		s.observer = nopObserver{}
	}
	if s.maxBackfillRuns <= 0 {
		s.maxBackfillRuns = DefaultMaxBackfillRuns
	}
	if s.maxAttempts <= 0 {
		s.maxAttempts = DefaultMaxAttempts
	}
	rt := pgrun.Config{
		LeaseDB:           cfg.LeaseDB,
		LockWait:          cfg.LockWait,
		ReconnectWait:     cfg.ReconnectWait,
		PrepareStatements: cfg.PrepareStatements,
		OnRetry:           s.observer.TxRetried,
	}
	if tracer := cfg.Tracer; tracer != nil {
		// Spans are named by the exported Store method found on the stack (tracing.Operation).
		rt.Trace = func(ctx context.Context) (context.Context, func(error)) {
			return tracer.StartOperation(ctx, "github.com/backfillsvc/backfill/repo", "repo")
		}
	}
	s.pg = pgrun.New(db, rt)
	return s
}

// dbNow reads the service's one clock, backfill_now() (migrations/00002_one_clock.sql). Go
// code that must know "now" (to plan a backfill's slots) asks the database, never the
// process's own clock, so that replicas whose clocks disagree still agree.
func dbNow(ctx context.Context, q sqlx.QueryerContext) (time.Time, error) {
	var now time.Time
	if err := sqlx.GetContext(ctx, q, &now, `SELECT backfill_now()`); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now.UTC(), nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pg.Ping(ctx) }

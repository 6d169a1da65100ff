// Package repo holds all SQL of the service. Public methods own their transaction; private
// helpers take sqlx.ExtContext so that they compose inside one.
package repo

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// Observer is told about events an operator alerts on. The metrics package implements it.
type Observer interface {
	TxRetried()
	BackfillCreated(state string)
	BackfillFinalized(state string)
	RunsClaimed(n int)
	LeasesExpired(n int)
}

type nopObserver struct{}

func (nopObserver) TxRetried()               {}
func (nopObserver) BackfillCreated(string)   {}
func (nopObserver) BackfillFinalized(string) {}
func (nopObserver) RunsClaimed(int)          {}
func (nopObserver) LeasesExpired(int)        {}

// Config tunes a Store. Zero values take the contract's defaults.
type Config struct {
	// MaxBackfillRuns caps the slots of one backfill (default 100000).
	MaxBackfillRuns int
	// MaxAttempts is the attempt at which an expired lease fails the run (default 3).
	MaxAttempts int
	// Observer receives events for metrics; nil means none.
	Observer Observer
}

// Store is the repository over one connection pool.
type Store struct {
	db              *sqlx.DB
	observer        Observer
	maxBackfillRuns int
	maxAttempts     int

	stmtMu      sync.Mutex
	getBackfill *sqlx.Stmt
	claimStmts  [2]*sqlx.Stmt // by claimScope (claim.go)
}

// New returns a Store over db.
func New(db *sqlx.DB, cfg Config) *Store {
	s := &Store{
		db:              db,
		observer:        cfg.Observer,
		maxBackfillRuns: cfg.MaxBackfillRuns,
		maxAttempts:     cfg.MaxAttempts,
	}
	if s.observer == nil {
		s.observer = nopObserver{}
	}
	if s.maxBackfillRuns <= 0 {
		s.maxBackfillRuns = 100000
	}
	if s.maxAttempts <= 0 {
		s.maxAttempts = 3
	}
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
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// Pool is a limit on running runs shared by the backfills and manual runs that name it.
type Pool struct {
	Name        string  `db:"name"`
	Slots       int     `db:"slots"`
	Description *string `db:"description"`
	// Running and Queued count the pool's runs, kept exact by triggers
	// (migrations/00013_pools.sql).
	Running   int       `db:"num_running"`
	Queued    int       `db:"num_queued"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
	// RateRuns and RatePer are the pool's pace (nil: none): at most RateRuns starts per
	// RatePer ("second", "minute", "hour"), in any window of that length.
	RateRuns *int    `db:"rate_runs"`
	RatePer  *string `db:"rate_per"`
	// NextStartAt is when the pool may start a run again while its pace is used up; nil
	// otherwise.
	NextStartAt *time.Time `db:"next_start_at"`
}

// poolColumns selects a Pool; next_start_at is computed by the database's clock
// (migrations/00026_pool_rate.sql).
const poolColumns = `name, slots, description, num_running, num_queued, created_at, updated_at,
	rate_runs, rate_per, pool_next_start(rate_runs, rate_per, rate_starts, backfill_now()) AS next_start_at`

// PoolRate is a pool's pace: at most Runs starts per Per.
type PoolRate struct {
	Runs int
	Per  string // "second", "minute" or "hour"
}

// PoolPutParams creates or replaces a pool's settings.
type PoolPutParams struct {
	Name        string
	Slots       int
	Description *string
	// Rate is the pool's pace; nil for none.
	Rate *PoolRate
}

// PoolPut creates or replaces a pool and reports whether it was created. Replacing keeps the
// counters: lowering slots below the running count stops nothing, claims just find no room
// until enough runs end. It keeps the log of recent starts while a pace remains, whatever
// its new figures (those starts happened, and a new pace counts them at once), and drops it
// with the pace.
func (s *Store) PoolPut(ctx context.Context, p PoolPutParams) (Pool, bool, error) {
	defer s.claimableMayHaveChanged() // more slots, or a pace relaxed
	var row struct {
		Pool
		Created bool `db:"created"`
	}
	var rateRuns *int
	var ratePer *string
	if p.Rate != nil {
		rateRuns, ratePer = &p.Rate.Runs, &p.Rate.Per
	}
	err := s.withRetry(ctx, func(a attempt) error {
		return sqlx.GetContext(a.ctx, a.db, &row, `
			INSERT INTO pools (name, slots, description, created_at, updated_at, rate_runs, rate_per)
			SELECT $1, $2, $3, backfill_now(), backfill_now(), $5, $6
			WHERE `+statementLockWait("$4")+`
			ON CONFLICT (name) DO UPDATE SET
				slots = EXCLUDED.slots,
				description = EXCLUDED.description,
				updated_at = EXCLUDED.updated_at,
				rate_runs = EXCLUDED.rate_runs,
				rate_per = EXCLUDED.rate_per,
				rate_starts = CASE WHEN EXCLUDED.rate_runs IS NULL THEN '{}' ELSE pools.rate_starts END
			RETURNING `+poolColumns+`, (xmax = 0) AS created`,
			p.Name, p.Slots, p.Description, a.lockWait, rateRuns, ratePer)
	})
	if err != nil {
		return Pool{}, false, fmt.Errorf("upsert pool %q: %w", p.Name, err)
	}
	return row.Pool, row.Created, nil
}

// PoolGet returns one pool.
func (s *Store) PoolGet(ctx context.Context, name string) (Pool, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Pool, error) { return s.poolGetOnce(ctx, q, name) })
}

// poolGetOnce is one attempt of PoolGet, which sends it again if its session dies.
func (s *Store) poolGetOnce(ctx context.Context, q pgrun.Queryer, name string) (Pool, error) {
	var p Pool
	err := sqlx.GetContext(ctx, q, &p, `SELECT `+poolColumns+` FROM pools WHERE name = $1`, name)
	if isNoRows(err) {
		return Pool{}, ErrPoolNotFound
	}
	if err != nil {
		return Pool{}, fmt.Errorf("get pool %q: %w", name, err)
	}
	return p, nil
}

// PoolList pages pools by name.
func (s *Store) PoolList(ctx context.Context, p ListParams) ([]Pool, int, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]Pool, int, error) { return s.poolListOnce(ctx, q, p) })
}

// poolListOnce is one attempt of PoolList, which sends it again if its session dies.
func (s *Store) poolListOnce(ctx context.Context, q pgrun.Queryer, p ListParams) ([]Pool, int, error) {
	var total int
	if err := sqlx.GetContext(ctx, q, &total, `SELECT count(*) FROM pools`); err != nil {
		return nil, 0, fmt.Errorf("count pools: %w", err)
	}
	pools := []Pool{}
	err := sqlx.SelectContext(ctx, q, &pools, `
		SELECT `+poolColumns+` FROM pools ORDER BY name LIMIT $1 OFFSET $2`, p.Limit, p.Offset)
	if err != nil {
		return nil, 0, fmt.Errorf("list pools: %w", err)
	}
	return pools, total, nil
}

// PoolDelete deletes a pool that no active backfill and no queued or running manual run
// names. Finished backfills keep the pool's name as a record of where they ran: the reference
// is checked when a backfill is written (migrations/00024), and nothing happens to them on
// the pool's side. The pool row is locked first, in its own statement: a creation or PATCH
// that names the pool holds a key-share lock on it (its reference check) until it commits,
// so the lock waits for it, and the check that follows, a new statement under READ
// COMMITTED, sees it. One that comes later waits for the delete and then fails its reference
// check (pool_not_found).
func (s *Store) PoolDelete(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		var found bool
		err := sqlx.GetContext(ctx, tx, &found, `SELECT true FROM pools WHERE name = $1 FOR UPDATE`, name)
		if isNoRows(err) {
			return ErrPoolNotFound
		}
		if err != nil {
			return fmt.Errorf("lock pool %q: %w", name, err)
		}
		var inUse bool
		err = sqlx.GetContext(ctx, tx, &inUse, `
			SELECT EXISTS (SELECT 1 FROM backfills WHERE pool = $1 AND state IN `+activeStatesSQL+`)
			    OR EXISTS (SELECT 1 FROM dag_runs WHERE pool = $1 AND backfill_id IS NULL
			               AND state IN ('queued', 'running'))`, name)
		if err != nil {
			return fmt.Errorf("check pool %q in use: %w", name, err)
		}
		if inUse {
			return fmt.Errorf("%w: %s", ErrPoolInUse, name)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pools WHERE name = $1`, name); err != nil {
			return fmt.Errorf("delete pool %q: %w", name, err)
		}
		return nil
	})
}

// poolMissing maps a failed pool reference to ErrUnknownPool: a write that names a pool
// relies on the reference check in its own statement (dag_runs' foreign key, backfills'
// trigger raising the same error) instead of reading the pool first, so that the check and
// the write cannot be separated by a concurrent delete.
func poolMissing(err error) error {
	if pqErr := pq.As(err, pqerror.ForeignKeyViolation); pqErr != nil {
		switch pqErr.Constraint {
		case "backfills_pool_fkey", "dag_runs_pool_fkey":
			return ErrUnknownPool
		}
	}
	return err
}

// maxPoolsGauged bounds the pools a metrics scrape reads: a scrape must stay cheap.
const maxPoolsGauged = 10000

// PoolFigures reads every pool's slots and counters (the first maxPoolsGauged by name), for
// the metrics scrape: one index-ordered read of a small table.
func (s *Store) PoolFigures(ctx context.Context) ([]Pool, error) {
	pools, _, err := s.PoolList(ctx, ListParams{Limit: maxPoolsGauged})
	return pools, err
}

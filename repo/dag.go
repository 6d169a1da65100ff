package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// DagPutParams creates or replaces a DAG. Defaults are filled in by the caller.
type DagPutParams struct {
	DagID         string
	Schedule      string
	Timezone      string
	MaxActiveRuns int
	IsPaused      bool
	Description   *string
}

// DagPut creates or replaces a DAG and reports whether it was created.
func (s *Store) DagPut(ctx context.Context, p DagPutParams) (Dag, bool, error) {
	defer s.claimableMayHaveChanged() // an unpause, or a raised max_active_runs
	if err := domain.ValidateSchedule(p.Schedule, p.Timezone); err != nil {
		return Dag{}, false, err
	}
	var row struct {
		Dag
		Created bool `db:"created"`
	}
	// xmax is 0 only on a freshly inserted row: it tells created from replaced in one trip.
	err := s.withRetry(ctx, func(a attempt) error {
		return sqlx.GetContext(a.ctx, a.db, &row, dagPutSQL,
			p.DagID, p.Schedule, p.Timezone, p.MaxActiveRuns, p.IsPaused, p.Description, a.lockWait)
	})
	if err != nil {
		return Dag{}, false, fmt.Errorf("upsert dag %q: %w", p.DagID, err)
	}
	return row.Dag, row.Created, nil
}

// dagPutSQL creates or replaces a DAG; it waits at most LOCK_WAIT ($7) for a row that another
// transaction holds.
var dagPutSQL = `
		INSERT INTO dags (` + dagColumns + `)
		SELECT $1, $2, $3, $4, $5, $6, backfill_now(), backfill_now()
		WHERE ` + statementLockWait("$7") + `
		ON CONFLICT (dag_id) DO UPDATE SET
			schedule = EXCLUDED.schedule,
			timezone = EXCLUDED.timezone,
			max_active_runs = EXCLUDED.max_active_runs,
			is_paused = EXCLUDED.is_paused,
			description = EXCLUDED.description,
			updated_at = EXCLUDED.updated_at
		RETURNING ` + dagColumns + `, (xmax = 0) AS created`

// DagGet returns one DAG.
func (s *Store) DagGet(ctx context.Context, dagID string) (Dag, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Dag, error) { return s.dagGetOnce(ctx, q, dagID) })
}

// dagGetOnce is one attempt of DagGet, which sends it again if its session dies.
func (s *Store) dagGetOnce(ctx context.Context, q pgrun.Queryer, dagID string) (Dag, error) {
	return dagGet(ctx, q, dagID, "")
}

// dagGet reads a DAG, optionally with a row lock clause such as "FOR SHARE".
func dagGet(ctx context.Context, q sqlx.QueryerContext, dagID, lock string) (Dag, error) {
	var d Dag
	err := sqlx.GetContext(ctx, q, &d, `
		SELECT `+dagColumns+` FROM dags WHERE dag_id = $1 `+lock, dagID)
	if isNoRows(err) {
		return Dag{}, ErrDagNotFound
	}
	if err != nil {
		return Dag{}, fmt.Errorf("get dag %q: %w", dagID, err)
	}
	return d, nil
}

// DagList pages DAGs by dag_id.
func (s *Store) DagList(ctx context.Context, p ListParams) ([]Dag, int, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]Dag, int, error) { return s.dagListOnce(ctx, q, p) })
}

// dagListOnce is one attempt of DagList, which sends it again if its session dies.
func (s *Store) dagListOnce(ctx context.Context, q pgrun.Queryer, p ListParams) ([]Dag, int, error) {
	var total int
	if err := sqlx.GetContext(ctx, q, &total, `SELECT count(*) FROM dags`); err != nil {
		return nil, 0, fmt.Errorf("count dags: %w", err)
	}
	dags := []Dag{}
	err := sqlx.SelectContext(ctx, q, &dags, `
		SELECT `+dagColumns+` FROM dags WHERE ($3::text IS NULL OR dag_id > $3)
		ORDER BY dag_id LIMIT $1 OFFSET $2`, p.Limit, p.Offset, p.After)
	if err != nil {
		return nil, 0, fmt.Errorf("list dags: %w", err)
	}
	return dags, total, nil
}

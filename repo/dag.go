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
	// Upstreams replace the DAG's (none: it depends on no DAG).
	Upstreams     []domain.Upstream
	DependsOnPast bool
}

// DagPut creates or replaces a DAG with its upstreams, in one transaction, and reports whether
// it was created. An upstream that does not exist is ErrUnknownUpstream; upstreams that would
// close a cycle are a domain.DependencyCycleError naming it.
func (s *Store) DagPut(ctx context.Context, p DagPutParams) (Dag, bool, error) {
	defer s.claimableMayHaveChanged() // an unpause, or a raised max_active_runs
	if err := domain.ValidateSchedule(p.Schedule, p.Timezone); err != nil {
		return Dag{}, false, err
	}
	if err := domain.ValidateUpstreams(p.DagID, p.Upstreams); err != nil {
		return Dag{}, false, err
	}
	var (
		dag     Dag
		created bool
	)
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// xmax is 0 only on a freshly inserted row: it tells created from replaced in one trip.
		if err := tx.GetContext(ctx, &created, dagPutSQL,
			p.DagID, p.Schedule, p.Timezone, p.MaxActiveRuns, p.IsPaused, p.Description, p.DependsOnPast); err != nil {
			return fmt.Errorf("upsert dag %q: %w", p.DagID, err)
		}
		if err := replaceUpstreams(ctx, tx, p.DagID, p.Upstreams); err != nil {
			return err
		}
		var err error
		dag, err = dagGetAPI(ctx, tx, p.DagID)
		return err
	})
	if err != nil {
		return Dag{}, false, err
	}
	return dag, created, nil
}

// dagPutSQL creates or replaces a DAG's row and answers whether it created it.
const dagPutSQL = `
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, description,
			depends_on_past, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, backfill_now(), backfill_now())
		ON CONFLICT (dag_id) DO UPDATE SET
			schedule = EXCLUDED.schedule,
			timezone = EXCLUDED.timezone,
			max_active_runs = EXCLUDED.max_active_runs,
			is_paused = EXCLUDED.is_paused,
			description = EXCLUDED.description,
			depends_on_past = EXCLUDED.depends_on_past,
			updated_at = EXCLUDED.updated_at
		RETURNING (xmax = 0) AS created`

// DagGet returns one DAG.
func (s *Store) DagGet(ctx context.Context, dagID string) (Dag, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Dag, error) { return s.dagGetOnce(ctx, q, dagID) })
}

// dagGetOnce is one attempt of DagGet, which sends it again if its session dies.
func (s *Store) dagGetOnce(ctx context.Context, q pgrun.Queryer, dagID string) (Dag, error) {
	return dagGetAPI(ctx, q, dagID)
}

// dagGetAPI reads a DAG with its dependencies, as the API answers it.
func dagGetAPI(ctx context.Context, q sqlx.QueryerContext, dagID string) (Dag, error) {
	return dagRead(ctx, q, dagAPIColumns, dagID, "")
}

// dagGet reads a DAG without its dependencies, optionally with a row lock clause such as
// "FOR SHARE".
func dagGet(ctx context.Context, q sqlx.QueryerContext, dagID, lock string) (Dag, error) {
	return dagRead(ctx, q, dagColumns, dagID, lock)
}

// dagRead reads one DAG's columns, with lock (a row lock clause, or "").
func dagRead(ctx context.Context, q sqlx.QueryerContext, columns, dagID, lock string) (Dag, error) {
	var d Dag
	err := sqlx.GetContext(ctx, q, &d, `SELECT `+columns+` FROM dags WHERE dag_id = $1 `+lock, dagID)
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
		SELECT `+dagAPIColumns+` FROM dags WHERE ($3::text IS NULL OR dag_id > $3)
		ORDER BY dag_id LIMIT $1 OFFSET $2`, p.Limit, p.Offset, p.After)
	if err != nil {
		return nil, 0, fmt.Errorf("list dags: %w", err)
	}
	return dags, total, nil
}

package repo

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
)

// backfillEstimate estimates what a plan would cost from the DAG's last successful runs (the
// latest to end, read along dag_runs_successes_by_end: 20 index entries whatever the DAG's
// history). A run marked success without running has no start and is not a sample. It
// answers nil and the reason when there is nothing to measure.
func backfillEstimate(ctx context.Context, q sqlx.QueryerContext, p domain.BackfillRequest, slots []domain.PlannedSlot) (*domain.Estimate, string, error) {
	var row struct {
		Sample    int             `db:"sample"`
		P50       sql.NullFloat64 `db:"p50"`
		PoolSlots sql.NullInt64   `db:"pool_slots"`
	}
	err := sqlx.GetContext(ctx, q, &row, `
		SELECT count(*) AS sample,
			percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) AS p50,
			(SELECT slots FROM pools WHERE name = $2) AS pool_slots
		FROM (
			SELECT extract(epoch FROM end_date - start_date)::float8 AS secs FROM dag_runs
			WHERE dag_id = $1 AND state = 'success' AND start_date IS NOT NULL
			ORDER BY end_date DESC LIMIT $3) s`,
		p.DagID, p.Pool, domain.EstimateSampleRuns)
	if err != nil {
		return nil, "", fmt.Errorf("read run durations of %q: %w", p.DagID, err)
	}
	if row.Sample == 0 || !row.P50.Valid {
		return nil, domain.EstimateNoSuccessfulRuns, nil
	}
	runs := 0
	for _, sl := range slots {
		if sl.Action != domain.ActionSkip {
			runs++
		}
	}
	concurrency := p.MaxActiveRuns
	if row.PoolSlots.Valid {
		concurrency = min(concurrency, int(row.PoolSlots.Int64))
	}
	e := domain.EstimateOf(runs, row.P50.Float64, row.Sample, concurrency)
	return &e, domain.EstimateFromSuccessfulRuns, nil
}

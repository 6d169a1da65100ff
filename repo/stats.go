package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// StateCounts counts active backfills by state (running, paused, canceling) and unfinished
// runs by state (queued, running), for the operator's gauges. Its cost grows with the active
// backfills and the unfinished runs outside backfills, never with history: runs in backfills
// are summed from the counters on their (active) backfill rows, the others found through
// their partial index.
func (s *Store) StateCounts(ctx context.Context) (backfills, runs map[string]int64, err error) {
	var rows []struct {
		Kind  string `db:"kind"`
		State string `db:"state"`
		N     int64  `db:"n"`
	}
	err = s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) error {
		return sqlx.SelectContext(ctx, q, &rows, stateCountsSQL)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("count states: %w", err)
	}
	// Every state has a series, zero included, so that a dashboard's line does not vanish.
	backfills = make(map[string]int64, len(domain.ActiveBackfillStates))
	for _, st := range domain.ActiveBackfillStates {
		backfills[string(st)] = 0
	}
	runs = map[string]int64{string(domain.RunQueued): 0, string(domain.RunRunning): 0}
	for _, r := range rows {
		if r.Kind == "backfill" {
			backfills[r.State] += r.N
		} else {
			runs[r.State] += r.N
		}
	}
	return backfills, runs, nil
}

// stateCountsSQL is StateCounts' one statement. The three reads of active backfills each use
// backfills_active_by_id.
var stateCountsSQL = `
	SELECT 'backfill' AS kind, state, count(*) AS n FROM backfills
	WHERE state IN ` + activeStatesSQL + ` GROUP BY state
	UNION ALL
	SELECT 'run', 'queued', coalesce(sum(num_queued), 0) FROM backfills
	WHERE state IN ` + activeStatesSQL + `
	UNION ALL
	SELECT 'run', 'running', coalesce(sum(num_running), 0) FROM backfills
	WHERE state IN ` + activeStatesSQL + `
	UNION ALL
	SELECT 'run', state, count(*) FROM dag_runs
	WHERE backfill_id IS NULL AND state IN ('queued', 'running') GROUP BY state`

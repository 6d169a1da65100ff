package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// QueuedByPriority counts the queued runs of running backfills by the backfills' priority,
// every priority from MinPriority to MaxPriority present (zero included, so that a
// dashboard's line does not vanish). It reads the backfills' counters, not the runs.
func (s *Store) QueuedByPriority(ctx context.Context) (map[int]int64, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (map[int]int64, error) {
		var rows []struct {
			Priority int   `db:"priority"`
			N        int64 `db:"n"`
		}
		if err := sqlx.SelectContext(ctx, q, &rows, `
			SELECT priority, sum(num_queued)::bigint AS n FROM backfills
			WHERE state = 'running' GROUP BY priority`); err != nil {
			return nil, fmt.Errorf("count queued runs by priority: %w", err)
		}
		out := make(map[int]int64, MaxPriority-MinPriority+1)
		for p := MinPriority; p <= MaxPriority; p++ {
			out[p] = 0
		}
		for _, r := range rows {
			out[r.Priority] = r.N
		}
		return out, nil
	})
}

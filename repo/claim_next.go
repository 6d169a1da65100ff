package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// RunClaimNextChange answers how long, by the database's clock, until a run in p's filters
// may become claimable without any commit announcing it: the earliest not_before of a
// deferred run, or the next start of a paced pool with queued runs. ok is false when there
// is none. A claim that waits (wait_seconds) and found nothing tries again then instead of at
// its next poll. The answer may be early (a deferred run of a paused backfill, a pool whose
// runs are outside the filters): an early try costs one empty claim. A deferral that ended in
// the last 100 ms still counts (the answer is then zero): the claim before this look-up ran
// at an earlier now, and may have missed by that much a run that is claimable now.
func (s *Store) RunClaimNextChange(ctx context.Context, p RunClaimParams) (time.Duration, bool, error) {
	secs, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (secs *float64, err error) {
		err = sqlx.GetContext(ctx, q, &secs, `
		SELECT extract(epoch FROM least(
			(SELECT min(not_before) FROM dag_runs
			 WHERE not_before IS NOT NULL AND not_before > backfill_now() - interval '100 milliseconds'
			   AND ($1::text IS NULL OR dag_id = $1)),
			(SELECT min(pool_next_start(rate_runs, rate_per, rate_starts, backfill_now())) FROM pools
			 WHERE rate_runs IS NOT NULL AND num_queued > 0 AND ($2::text IS NULL OR name = $2))
		) - backfill_now())::float8`, p.DagID, p.Pool)
		return secs, err
	})
	if err != nil {
		return 0, false, fmt.Errorf("next claimable time: %w", err)
	}
	if secs == nil {
		return 0, false, nil
	}
	return max(time.Duration(*secs*float64(time.Second)), 0), true, nil
}

package invariants

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
)

// CheckClaimWaits checks the claims' aging (repo/claim_priority.go): no backfill that a claim
// could serve now has waited longer than its priority allows. A backfill of priority p that
// claims pass over reaches the top effective priority (repo.MaxPriority) after
// (MaxPriority − p) × aging of waiting, and the next claim after that serves it; the bound
// allows one aging more for the claims that come in between. Waiting is counted from
// claim_wait_since (its last claim, or when it last became claimable).
//
// "Could serve now": running, under max_active_runs, with a queued run that no deferral holds
// back, and in no pool or in a pool with a free slot. Call it while claimers claim steadily
// (every aging several times): with no claimer, every backfill waits, and that is no
// violation. It answers the violations, one line each; an error only when it could not read.
func CheckClaimWaits(ctx context.Context, db *sqlx.DB, aging time.Duration) ([]string, error) {
	var rows []struct {
		ID       int64   `db:"id"`
		Priority int     `db:"priority"`
		Waited   float64 `db:"waited"`
	}
	err := db.SelectContext(ctx, &rows, `
		SELECT b.id, b.priority, extract(epoch FROM backfill_now() - b.claim_wait_since)::float8 AS waited
		FROM backfills b
		WHERE b.state = 'running' AND b.num_running < b.max_active_runs
		  AND EXISTS (SELECT 1 FROM dag_runs r WHERE r.backfill_id = b.id AND r.state = 'queued'
		              AND (r.not_before IS NULL OR r.not_before <= backfill_now()))
		  AND (b.pool IS NULL OR EXISTS (SELECT 1 FROM pools p WHERE p.name = b.pool AND p.num_running < p.slots))
		  AND extract(epoch FROM backfill_now() - b.claim_wait_since) > ($1::float8 - b.priority + 1) * $2::float8
		ORDER BY b.id`, repo.MaxPriority, aging.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim waits: %w", err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("invariant (j) violated: backfill %d (priority %d) claimable and waiting %.3fs, more than %d agings of %s",
			r.ID, r.Priority, r.Waited, repo.MaxPriority-r.Priority+1, aging))
	}
	return out, nil
}

package repo

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// BackfillPatchParams changes settings of an active backfill (JSON merge patch: a field is
// changed only when Set*, and a null clears it where the field allows null).
type BackfillPatchParams struct {
	ID             int64
	MaxActiveRuns  *int
	SetMaxFailed   bool
	MaxFailedRuns  *int
	SetDescription bool
	Description    *string
	// SetPool moves the backfill's runs to Pool (nil: to no pool). Running runs keep running;
	// the counter trigger moves their count with them.
	SetPool bool
	Pool    *string
}

// BackfillPatch changes max_active_runs, max_failed_runs and description of an active
// backfill in one guarded statement. Claims lock the backfill row and re-read
// max_active_runs, so the next claim obeys a new limit; running runs above it go on.
// Lowering max_failed_runs to at or below the failed count does not pause by itself: the
// budget is checked when a run fails (migrations/00006).
func (s *Store) BackfillPatch(ctx context.Context, p BackfillPatchParams) (Backfill, error) {
	defer s.eventsMayBeWritten()
	var b Backfill
	err := s.withRetry(ctx, func() error {
		return sqlx.GetContext(ctx, s.db, &b, backfillPatchSQL,
			p.ID, p.MaxActiveRuns, p.SetMaxFailed, p.MaxFailedRuns, p.SetDescription, p.Description, p.SetPool, p.Pool)
	})
	if err == nil {
		return b, nil
	}
	if errors.Is(poolMissing(err), ErrUnknownPool) {
		return Backfill{}, fmt.Errorf("%w: %s", ErrUnknownPool, *p.Pool)
	}
	if !isNoRows(err) {
		return Backfill{}, fmt.Errorf("patch backfill %d: %w", p.ID, err)
	}
	cur, err := s.BackfillGet(ctx, p.ID)
	if err != nil {
		return Backfill{}, err
	}
	return Backfill{}, fmt.Errorf("%w: backfill %d is %s", ErrBackfillNotActive, p.ID, cur.State)
}

var backfillPatchSQL = `
	UPDATE backfills SET
		max_active_runs = coalesce($2, max_active_runs),
		max_failed_runs = CASE WHEN $3 THEN $4 ELSE max_failed_runs END,
		description = CASE WHEN $5 THEN $6 ELSE description END,
		pool = CASE WHEN $7 THEN $8::text ELSE pool END,
		-- A patch that changes nothing leaves the row as it was: no updated_at, and so no
		-- backfill.updated (the event writer fires on a change of any of these).
		updated_at = CASE
			WHEN coalesce($2, max_active_runs) IS DISTINCT FROM max_active_runs
				OR (CASE WHEN $3 THEN $4 ELSE max_failed_runs END) IS DISTINCT FROM max_failed_runs
				OR (CASE WHEN $5 THEN $6 ELSE description END) IS DISTINCT FROM description
				OR (CASE WHEN $7 THEN $8::text ELSE pool END) IS DISTINCT FROM pool
			THEN backfill_now() ELSE updated_at END
	WHERE id = $1 AND state IN ` + activeStatesSQL + `
	RETURNING ` + backfillColumns

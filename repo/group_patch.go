package repo

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// GroupPatchParams changes an active group's settings; nil leaves a field as it is, except
// where a Set flag says the field was sent (a null clears it).
type GroupPatchParams struct {
	ID             int64
	Priority       *int
	MaxActiveRuns  *int
	SetMaxFailed   bool
	MaxFailedRuns  *int
	SetDescription bool
	Description    *string
}

// BackfillGroupPatch changes a group's settings and its active members' in one transaction
// (group row first, then the members in id order): the next claim ranks every member by the
// new priority and obeys the new max_active_runs. The failure budget is the group's; the
// members have none of their own. A terminal group is ErrBackfillNotActive.
func (s *Store) BackfillGroupPatch(ctx context.Context, p GroupPatchParams) (BackfillGroup, error) {
	defer s.eventsMayBeWritten()
	var g BackfillGroup
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		if g, err = groupGet(ctx, tx, p.ID, "FOR NO KEY UPDATE"); err != nil {
			return err
		}
		if !g.State.Active() {
			return fmt.Errorf("%w: backfill group %d is %s", ErrBackfillNotActive, p.ID, g.State)
		}
		members, err := lockMembers(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE backfill_groups SET
				priority = coalesce($2, priority),
				max_active_runs = coalesce($3, max_active_runs),
				max_failed_runs = CASE WHEN $4 THEN $5 ELSE max_failed_runs END,
				description = CASE WHEN $6 THEN $7 ELSE description END,
				updated_at = backfill_change_time(updated_at)
			WHERE id = $1`,
			p.ID, p.Priority, p.MaxActiveRuns, p.SetMaxFailed, p.MaxFailedRuns, p.SetDescription, p.Description)
		if err != nil {
			return fmt.Errorf("patch backfill group %d: %w", p.ID, err)
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE backfills SET
				priority = coalesce($2, priority),
				max_active_runs = coalesce($3, max_active_runs),
				description = CASE WHEN $4 THEN $5 ELSE description END,
				updated_at = backfill_change_time(updated_at)
			WHERE id = ANY ($1) AND state IN `+activeStatesSQL,
			members, p.Priority, p.MaxActiveRuns, p.SetDescription, p.Description)
		if err != nil {
			return fmt.Errorf("patch members of backfill group %d: %w", p.ID, err)
		}
		g, err = groupGet(ctx, tx, p.ID, "")
		return err
	})
	return g, err
}

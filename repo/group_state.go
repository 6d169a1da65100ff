package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// A group's pause, unpause and cancel act on the group and all its members in one
// transaction, locking the group's row, then its members' rows in id order, then their runs:
// the order a member's own changes take after its row (a report's failure that spends the
// group's budget locks the group after its member, and a deadlock with an action here is
// retried).

// BackfillGroupPause pauses a running group and its running members. Pausing a paused group
// is a no-op; a canceling or terminal one is ErrBackfillNotActive.
func (s *Store) BackfillGroupPause(ctx context.Context, id int64) (BackfillGroup, error) {
	return s.groupToggle(ctx, id, domain.BackfillRunning, domain.BackfillPaused)
}

// BackfillGroupUnpause resumes a paused group and its paused members (those the group's
// failure budget paused too).
func (s *Store) BackfillGroupUnpause(ctx context.Context, id int64) (BackfillGroup, error) {
	return s.groupToggle(ctx, id, domain.BackfillPaused, domain.BackfillRunning)
}

func (s *Store) groupToggle(ctx context.Context, id int64, from, to domain.BackfillState) (BackfillGroup, error) {
	defer s.eventsMayBeWritten()
	var g BackfillGroup
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		if g, err = groupGet(ctx, tx, id, "FOR NO KEY UPDATE"); err != nil {
			return err
		}
		switch g.State {
		case to:
			return nil
		case from:
		default:
			return fmt.Errorf("%w: backfill group %d is %s", ErrBackfillNotActive, id, g.State)
		}
		members, err := lockMembers(ctx, tx, id)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE backfill_groups SET state = $2, updated_at = backfill_change_time(updated_at),
				pause_reason = CASE WHEN $2 = 'paused' THEN 'user' END
			WHERE id = $1`, id, to)
		if err != nil {
			return fmt.Errorf("set backfill group %d %s: %w", id, to, err)
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE backfills SET state = $2, updated_at = backfill_change_time(updated_at),
				pause_reason = CASE WHEN $2 = 'paused' THEN 'user' END
			WHERE id = ANY ($1) AND state = $3`, members, to, from)
		if err != nil {
			return fmt.Errorf("set members of backfill group %d %s: %w", id, to, err)
		}
		g, err = groupGet(ctx, tx, id, "")
		return err
	})
	return g, err
}

// lockMembers locks a group's member rows in id order and answers their ids.
func lockMembers(ctx context.Context, tx *sqlx.Tx, groupID int64) (pq.Int64Array, error) {
	var ids pq.Int64Array
	err := sqlx.SelectContext(ctx, tx, &ids, `
		SELECT id FROM backfills WHERE group_id = $1 ORDER BY id FOR NO KEY UPDATE`, groupID)
	if err != nil {
		return nil, fmt.Errorf("lock members of backfill group %d: %w", groupID, err)
	}
	return ids, nil
}

// BackfillGroupCancel cancels every member's queued runs and lets running ones finish: each
// member is canceling until its last run ends, or canceled at once; the group is canceled
// when every member is (here, or by the sweep). Canceling a canceling group is a no-op.
func (s *Store) BackfillGroupCancel(ctx context.Context, id int64) (BackfillGroup, error) {
	defer s.eventsMayBeWritten()
	var g BackfillGroup
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		if g, err = groupGet(ctx, tx, id, "FOR NO KEY UPDATE"); err != nil {
			return err
		}
		switch g.State {
		case domain.BackfillCanceling:
			return nil
		case domain.BackfillRunning, domain.BackfillPaused:
		default:
			return fmt.Errorf("%w: backfill group %d is %s", ErrBackfillNotActive, id, g.State)
		}
		members, err := lockMembers(ctx, tx, id)
		if err != nil {
			return err
		}
		// Every member's queued runs are canceled here: the cancels need not follow their
		// dependencies (dag_runs_follow_dependencies), which would only find canceled runs.
		for _, st := range []struct {
			sql  string
			args []any
		}{
			{`UPDATE backfill_groups SET state = 'canceling', pause_reason = NULL, updated_at = backfill_change_time(updated_at)
			  WHERE id = $1`, []any{id}},
			{`UPDATE backfills SET state = 'canceling', updated_at = backfill_change_time(updated_at)
			  WHERE id = ANY ($1) AND state IN ('running', 'paused')`, []any{members}},
			{`SELECT set_config('backfill.cascade', 'on', true)`, nil},
			{`UPDATE dag_runs SET state = 'canceled', end_date = backfill_now()
			  WHERE backfill_id = ANY ($1) AND state = 'queued'`, []any{members}},
			{`SELECT set_config('backfill.cascade', 'off', true)`, nil},
			{`UPDATE backfills SET state = 'canceled', completed_at = backfill_now(), updated_at = backfill_change_time(updated_at)
			  WHERE id = ANY ($1) AND state = 'canceling' AND num_running = 0 AND num_queued = 0`, []any{members}},
			{`UPDATE backfill_groups SET state = 'canceled', completed_at = backfill_now(), updated_at = backfill_change_time(updated_at)
			  WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM backfills WHERE group_id = $1 AND state IN ` + activeStatesSQL + `)`, []any{id}},
		} {
			if _, err := tx.ExecContext(ctx, st.sql, st.args...); err != nil {
				return fmt.Errorf("cancel backfill group %d: %w", id, err)
			}
		}
		g, err = groupGet(ctx, tx, id, "")
		return err
	})
	return g, err
}

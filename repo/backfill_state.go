package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
)

// BackfillPause stops handing out the backfill's runs. Pausing a paused backfill is a no-op.
// A group's member is paused, unpaused and canceled with its group (ErrManagedByGroup).
func (s *Store) BackfillPause(ctx context.Context, id int64) (Backfill, error) {
	return s.backfillToggle(ctx, id, domain.BackfillRunning, domain.BackfillPaused)
}

// BackfillUnpause resumes a paused backfill. Unpausing a running backfill is a no-op.
func (s *Store) BackfillUnpause(ctx context.Context, id int64) (Backfill, error) {
	return s.backfillToggle(ctx, id, domain.BackfillPaused, domain.BackfillRunning)
}

// toggleTries bounds backfillToggle's attempts while concurrent toggles keep flipping the
// state under it.
const toggleTries = 5

// backfillToggle moves an active backfill from one state to the other, or answers it as it is
// when it is already there. The UPDATE sees the row as of its snapshot, so a concurrent toggle
// that commits between the UPDATE and the read after it can leave the row in the state this
// one moves from: that is not "not active" (a pause racing an unpause answered 409 for a
// running backfill), so the UPDATE is sent again and applies after the other toggle.
func (s *Store) backfillToggle(ctx context.Context, id int64, from, to domain.BackfillState) (Backfill, error) {
	defer s.eventsMayBeWritten()
	var b Backfill
	for try := 1; ; try++ {
		err := s.withRetry(ctx, func(a attempt) error {
			return sqlx.GetContext(a.ctx, a.db, &b, `
				UPDATE backfills SET state = $3, updated_at = backfill_change_time(updated_at),
					pause_reason = CASE WHEN $3 = 'paused' THEN 'user' END
				WHERE id = $1 AND state = $2 AND group_id IS NULL AND `+statementLockWait("$4")+`
				RETURNING `+backfillColumns, id, from, to, a.lockWait)
		})
		if err == nil {
			return b, nil
		}
		if !isNoRows(err) {
			return Backfill{}, fmt.Errorf("set backfill %d %s: %w", id, to, err)
		}
		b, err = s.BackfillGet(ctx, id)
		if err != nil {
			return Backfill{}, err
		}
		switch {
		case b.GroupID != nil:
			return Backfill{}, fmt.Errorf("%w: backfill %d is a member of group %d", ErrManagedByGroup, id, *b.GroupID)
		case b.State == to:
			return b, nil
		case b.State != from:
			return Backfill{}, fmt.Errorf("%w: backfill %d is %s", ErrBackfillNotActive, id, b.State)
		case try == toggleTries:
			// Still flipping: the UPDATEs saw it in the target state, where this toggle
			// changes nothing; it is active, as it is answered.
			return b, nil
		}
	}
}

// BackfillCancel cancels the backfill's queued runs and lets running ones finish: the backfill
// is canceling until the sweep sees no run left running, or canceled at once if none runs.
func (s *Store) BackfillCancel(ctx context.Context, id int64) (Backfill, error) {
	defer s.eventsMayBeWritten()
	var b Backfill
	var finished bool
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		finished = false
		// The state change locks the backfill row before its runs are touched (lock order).
		res, err := tx.ExecContext(ctx, `
			UPDATE backfills SET state = 'canceling', updated_at = backfill_change_time(updated_at)
			WHERE id = $1 AND state IN ('running', 'paused') AND group_id IS NULL`, id)
		if err != nil {
			return fmt.Errorf("cancel backfill %d: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			b, err = backfillGet(ctx, tx, id, "")
			if err != nil {
				return err
			}
			if b.GroupID != nil {
				return fmt.Errorf("%w: backfill %d is a member of group %d", ErrManagedByGroup, id, *b.GroupID)
			}
			if b.State != domain.BackfillCanceling {
				return fmt.Errorf("%w: backfill %d is %s", ErrBackfillNotActive, id, b.State)
			}
			return nil
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE dag_runs SET state = 'canceled', end_date = backfill_now()
			WHERE backfill_id = $1 AND state = 'queued'`, id)
		if err != nil {
			return fmt.Errorf("cancel queued runs of backfill %d: %w", id, err)
		}
		res, err = tx.ExecContext(ctx, `
			UPDATE backfills SET state = 'canceled', completed_at = backfill_now(), updated_at = backfill_change_time(updated_at)
			WHERE id = $1 AND state = 'canceling' AND num_running = 0 AND num_queued = 0`, id)
		if err != nil {
			return fmt.Errorf("finish canceled backfill %d: %w", id, err)
		}
		n, _ := res.RowsAffected()
		finished = n == 1
		b, err = backfillGet(ctx, tx, id, "")
		return err
	})
	if err == nil && finished {
		s.observer.BackfillFinalized(string(domain.BackfillCanceled))
	}
	return b, err
}

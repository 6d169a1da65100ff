package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// planSlots plans a request against its DAG (see domain.PlanSlots) under this store's cap.
func (s *Store) planSlots(dag Dag, p domain.BackfillRequest, now time.Time) ([]domain.PlannedSlot, error) {
	return domain.PlanSlots(dag.Schedule, dag.Timezone, p, now, s.maxBackfillRuns)
}

// existingRun is a run that holds a slot's date, as read to decide the slot.
type existingRun struct {
	ID          int64           `db:"id"`
	LogicalDate time.Time       `db:"logical_date"`
	State       domain.RunState `db:"state"`
}

// decideSlots reads the runs that already exist in the window, in one query, and decides each
// slot: create, reprocess (taking the run over) or skip with a reason. The dry run uses it;
// creation reads only the dates whose insert conflicted (see backfillInsertAll).
func decideSlots(ctx context.Context, q sqlx.QueryerContext, dagID string, behavior domain.ReprocessBehavior, slots []domain.PlannedSlot) error {
	if len(slots) == 0 {
		return nil
	}
	first, last := domain.Window(slots)
	var runs []existingRun
	err := sqlx.SelectContext(ctx, q, &runs, `
		SELECT id, logical_date, state FROM dag_runs
		WHERE dag_id = $1 AND logical_date BETWEEN $2 AND $3`, dagID, first, last)
	if err != nil {
		return fmt.Errorf("read existing runs: %w", err)
	}
	existing := make([]domain.ExistingRun, len(runs))
	for i, r := range runs {
		existing[i] = domain.ExistingRun{ID: r.ID, LogicalDate: r.LogicalDate, State: r.State}
	}
	domain.DecideExisting(slots, behavior, existing)
	return nil
}

// DryRun is what a creation would do: its slots and the digest of that plan.
type DryRun struct {
	Slots    []domain.PlannedSlot
	PlanHash string
	// Estimate is what the plan would cost, nil when there is no history to measure;
	// EstimateBasis says which.
	Estimate      *domain.Estimate
	EstimateBasis string
}

// BackfillDryRun answers what a creation would do, writing nothing.
func (s *Store) BackfillDryRun(ctx context.Context, p domain.BackfillRequest) (DryRun, error) {
	dag, now, err := s.dagAndNow(ctx, p.DagID)
	if err != nil {
		return DryRun{}, err
	}
	slots, err := s.planSlots(dag, p, now)
	if err != nil {
		return DryRun{}, err
	}
	out := DryRun{Slots: slots}
	err = s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) error {
		if err := decideSlots(ctx, q, p.DagID, p.ReprocessBehavior, slots); err != nil {
			return err
		}
		out.Estimate, out.EstimateBasis, err = backfillEstimate(ctx, q, p, slots)
		return err
	})
	if err != nil {
		return DryRun{}, err
	}
	out.PlanHash = domain.PlanHash(dag.Schedule, dag.Timezone, slots)
	return out, nil
}

// dagAndNow reads what planning a backfill needs, the DAG and the database's clock, outside
// any transaction, sent again on a new session if theirs dies (readRetried).
func (s *Store) dagAndNow(ctx context.Context, dagID string) (Dag, time.Time, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Dag, time.Time, error) {
		dag, err := dagGet(ctx, q, dagID, "")
		if err != nil {
			return Dag{}, time.Time{}, err
		}
		now, err := dbNow(ctx, q)
		return dag, now, err
	})
}

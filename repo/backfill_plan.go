package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/backfillsvc/backfill/schedule"
	"github.com/jmoiron/sqlx"
)

// BackfillCreateParams describes a backfill. Defaults are filled in by the caller.
type BackfillCreateParams struct {
	DagID             string
	FromDate          time.Time
	ToDate            time.Time
	RunBackwards      bool
	DagRunConf        JSON
	ReprocessBehavior string
	MaxActiveRuns     int
	Description       *string
	// IdempotencyKey is "" when the request carries none.
	IdempotencyKey string
	// MaxFailedRuns is the failure budget; nil for none.
	MaxFailedRuns *int
	// IfMatch binds the creation to a plan: nil checks nothing, otherwise the settled plan's
	// digest must be one of these.
	IfMatch []string
	// Dates, when not nil, are the slots' logical dates in sort order, instead of the
	// schedule's ticks in the window (a retry's slots).
	Dates []time.Time
	// ParentBackfillID is the backfill a retry is made from.
	ParentBackfillID *int64
}

// Reprocess behaviours.
const (
	ReprocessNone      = "none"
	ReprocessFailed    = "failed"
	ReprocessCompleted = "completed"
)

// planSlots validates a backfill request against its DAG and lists its slots in sort order,
// without looking at existing runs.
func (s *Store) planSlots(dag Dag, p BackfillCreateParams, now time.Time) ([]PlannedSlot, error) {
	sched, err := schedule.Parse(dag.Schedule, dag.Timezone)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDag, err)
	}
	if p.Dates != nil {
		return slotsForDates(sched, p.Dates), nil
	}
	if p.FromDate.After(p.ToDate) {
		return nil, fmt.Errorf("%w: from_date is after to_date", ErrInvalidBackfill)
	}
	if p.FromDate.After(now) {
		return nil, fmt.Errorf("%w: from_date and to_date are both in the future", ErrInvalidBackfill)
	}
	ticks, err := sched.Slots(p.FromDate, p.ToDate, now, s.maxBackfillRuns)
	if errors.Is(err, schedule.ErrTooManySlots) {
		return nil, fmt.Errorf("%w: the window has more than %d slots", ErrTooManyRuns, s.maxBackfillRuns)
	}
	if err != nil {
		return nil, fmt.Errorf("compute slots: %w", err)
	}
	if p.RunBackwards {
		slices.Reverse(ticks)
	}
	slots := make([]PlannedSlot, len(ticks))
	for i, t := range ticks {
		slots[i] = PlannedSlot{SortOrdinal: i + 1, LogicalDate: t.LogicalDate, IntervalEnd: t.IntervalEnd, Action: ActionCreate}
	}
	return slots, nil
}

type existingRun struct {
	ID          int64     `db:"id"`
	LogicalDate time.Time `db:"logical_date"`
	State       string    `db:"state"`
}

// decideSlots reads the runs that already exist in the window, in one query, and decides each
// slot: create, reprocess (taking the run over) or skip with a reason. The dry run uses it;
// creation reads only the dates whose insert conflicted (see backfillInsertAll).
func decideSlots(ctx context.Context, q sqlx.QueryerContext, dagID, behavior string, slots []PlannedSlot) error {
	if len(slots) == 0 {
		return nil
	}
	first, last := slots[0].LogicalDate, slots[len(slots)-1].LogicalDate
	if first.After(last) {
		first, last = last, first
	}
	var runs []existingRun
	err := sqlx.SelectContext(ctx, q, &runs, `
		SELECT id, logical_date, state FROM dag_runs
		WHERE dag_id = $1 AND logical_date BETWEEN $2 AND $3`, dagID, first, last)
	if err != nil {
		return fmt.Errorf("read existing runs: %w", err)
	}
	if len(runs) == 0 {
		return nil
	}
	byDate := make(map[int64]existingRun, len(runs))
	for _, r := range runs {
		byDate[r.LogicalDate.UnixMicro()] = r
	}
	for i := range slots {
		if r, ok := byDate[slots[i].LogicalDate.UnixMicro()]; ok {
			decide(&slots[i], behavior, r)
		}
	}
	return nil
}

// decide settles a slot whose date already has a run: reprocess it or skip with a reason.
func decide(slot *PlannedSlot, behavior string, r existingRun) {
	if reason, skip := skipReason(behavior, r.State); skip {
		slot.Action = ActionSkip
		slot.ExceptionReason = &reason
		return
	}
	slot.Action = ActionReprocess
	slot.ExistingRunID = r.ID
}

// skipReason applies the reprocess rules of the contract to a run that exists for a slot.
func skipReason(behavior, state string) (string, bool) {
	switch {
	case state == RunQueued || state == RunRunning:
		return ReasonInFlight, true
	case behavior == ReprocessCompleted:
		return "", false
	case behavior == ReprocessFailed && (state == RunFailed || state == RunCanceled):
		return "", false
	default:
		return ReasonAlreadyExists, true
	}
}

// DryRun is what a creation would do: its slots and the digest of that plan.
type DryRun struct {
	Slots    []PlannedSlot
	PlanHash string
}

// BackfillDryRun answers what a creation would do, writing nothing.
func (s *Store) BackfillDryRun(ctx context.Context, p BackfillCreateParams) (DryRun, error) {
	dag, err := dagGet(ctx, s.db, p.DagID, "")
	if err != nil {
		return DryRun{}, err
	}
	now, err := dbNow(ctx, s.db)
	if err != nil {
		return DryRun{}, err
	}
	slots, err := s.planSlots(dag, p, now)
	if err != nil {
		return DryRun{}, err
	}
	if err := decideSlots(ctx, s.db, p.DagID, p.ReprocessBehavior, slots); err != nil {
		return DryRun{}, err
	}
	return DryRun{Slots: slots, PlanHash: PlanHash(dag.Schedule, dag.Timezone, slots)}, nil
}

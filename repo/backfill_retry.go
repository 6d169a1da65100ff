package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// BackfillRetryParams asks for a new backfill of a terminal backfill's failed and canceled
// slots. Nil fields default to the parent's.
type BackfillRetryParams struct {
	ParentID       int64
	MaxActiveRuns  *int
	MaxFailedRuns  *int
	SetMaxFailed   bool // MaxFailedRuns was given (null included)
	DagRunConf     JSON
	SetConf        bool // DagRunConf was given (null included)
	Description    *string
	SetDescription bool
	IdempotencyKey string
	IfMatch        []string
	// Pool replaces the parent's pool when SetPool (null for none).
	Pool    *string
	SetPool bool
	// CodeRef replaces the parent's code_ref when not nil.
	CodeRef *string
	// CreatedBy and Reason are the retry's own: a retry is a new request, by whoever asks.
	CreatedBy *string
	Reason    *string
	// LogicalDates, when not nil, are the slots to retry instead of the failed and canceled
	// ones: any slots of the parent's window, each decided as the others are.
	LogicalDates []time.Time
	// Priority replaces the parent's priority when not nil.
	Priority *int
}

// BackfillRetry creates a backfill of the same DAG whose slots are the parent's slots whose
// run ended failed or canceled as the parent's record shows, each decided with
// reprocess_behavior "failed". It goes through BackfillCreate, so it is one SERIALIZABLE
// transaction with the same answers (409 while the DAG has an active backfill,
// Idempotency-Key, If-Match). A terminal backfill's record never changes again, so the
// slots read here outside the transaction stay true.
func (s *Store) BackfillRetry(ctx context.Context, rp BackfillRetryParams) (Backfill, bool, error) {
	defer s.eventsMayBeWritten()
	parent, err := s.BackfillGet(ctx, rp.ParentID)
	if err != nil {
		return Backfill{}, false, err
	}
	switch parent.State {
	case domain.BackfillSucceeded, domain.BackfillFailed, domain.BackfillCanceled:
	default:
		return Backfill{}, false, fmt.Errorf("%w: backfill %d is %s", ErrBackfillNotTerminal, parent.ID, parent.State)
	}
	if rp.LogicalDates != nil {
		return s.BackfillCreate(ctx, retryRequest(parent, rp, nil))
	}
	dates, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (dates []time.Time, err error) {
		err = sqlx.SelectContext(ctx, q, &dates, `
			SELECT s.logical_date FROM backfill_slot_records s
			WHERE s.backfill_id = $1 AND s.state IN ('failed', 'canceled')
			ORDER BY s.sort_ordinal`, parent.ID)
		return dates, err
	})
	if err != nil {
		return Backfill{}, false, fmt.Errorf("read failed slots of backfill %d: %w", parent.ID, err)
	}
	if len(dates) == 0 {
		return Backfill{}, false, fmt.Errorf("%w: no slot of backfill %d failed or was canceled", ErrNoRunsToCreate, parent.ID)
	}
	return s.BackfillCreate(ctx, retryRequest(parent, rp, dates))
}

// retryRequest is the creation a retry of parent makes: its slots are dates (the failed and
// canceled ones), or rp.LogicalDates when given; its settings are the parent's unless rp
// gives them.
func retryRequest(parent Backfill, rp BackfillRetryParams, dates []time.Time) domain.BackfillRequest {
	p := domain.BackfillRequest{
		LogicalDates:      rp.LogicalDates,
		DagID:             parent.DagID,
		FromDate:          parent.FromDate,
		ToDate:            parent.ToDate,
		RunBackwards:      parent.RunBackwards,
		DagRunConf:        parent.DagRunConf,
		ReprocessBehavior: domain.ReprocessFailed,
		MaxActiveRuns:     parent.MaxActiveRuns,
		Description:       parent.Description,
		MaxFailedRuns:     parent.MaxFailedRuns,
		IdempotencyKey:    rp.IdempotencyKey,
		IfMatch:           rp.IfMatch,
		Dates:             dates,
		ParentBackfillID:  &parent.ID,
		Pool:              parent.Pool,
		CodeRef:           parent.CodeRef,
		CreatedBy:         rp.CreatedBy,
		Reason:            rp.Reason,
		Priority:          parent.Priority,
	}
	if rp.Priority != nil {
		p.Priority = *rp.Priority
	}
	if rp.CodeRef != nil {
		p.CodeRef = rp.CodeRef
	}
	if rp.SetPool {
		p.Pool = rp.Pool
	}
	if rp.MaxActiveRuns != nil {
		p.MaxActiveRuns = *rp.MaxActiveRuns
	}
	if rp.SetMaxFailed {
		p.MaxFailedRuns = rp.MaxFailedRuns
	}
	if rp.SetConf {
		p.DagRunConf = rp.DagRunConf
	}
	if rp.SetDescription {
		p.Description = rp.Description
	}
	return p
}

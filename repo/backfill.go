package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// BackfillGet returns one backfill. Its progress is read from counters on the row, so the cost
// is one primary-key lookup whatever the size of the backfill. Clients poll it: it is prepared
// once per pooled connection unless a transaction pooler sits in between (pgrun/prepared.go).
func (s *Store) BackfillGet(ctx context.Context, id int64) (Backfill, error) {
	return readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Backfill, error) { return s.backfillGetOnce(ctx, q, id) })
}

// backfillGetOnce is one attempt of BackfillGet, which sends it again if its session dies.
func (s *Store) backfillGetOnce(ctx context.Context, q pgrun.Queryer, id int64) (Backfill, error) {
	var b Backfill
	err := s.hot(ctx, q, backfillGetSQL).QueryRowxContext(ctx, backfillGetSQL, id).Scan(b.scanDest()...)
	if isNoRows(err) {
		return Backfill{}, ErrBackfillNotFound
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("get backfill %d: %w", id, err)
	}
	return b, nil
}

const backfillGetSQL = `SELECT ` + backfillColumns + ` FROM backfills WHERE id = $1`

func backfillGet(ctx context.Context, q sqlx.QueryerContext, id int64, lock string) (Backfill, error) {
	var b Backfill
	err := sqlx.GetContext(ctx, q, &b, `SELECT `+backfillColumns+` FROM backfills WHERE id = $1 `+lock, id)
	if isNoRows(err) {
		return Backfill{}, ErrBackfillNotFound
	}
	if err != nil {
		return Backfill{}, fmt.Errorf("get backfill %d: %w", id, err)
	}
	return b, nil
}

// BackfillListParams filters backfills.
type BackfillListParams struct {
	DagID  *string
	State  *string
	Active *bool
	// Descending orders by id from newest to oldest.
	Descending bool
	ListParams
}

// BackfillList pages backfills by id.
func (s *Store) BackfillList(ctx context.Context, p BackfillListParams) ([]Backfill, int, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]Backfill, int, error) {
		return s.backfillListOnce(ctx, q, p)
	})
}

// backfillListOnce is one attempt of BackfillList, which sends it again if its session dies.
func (s *Store) backfillListOnce(ctx context.Context, q pgrun.Queryer, p BackfillListParams) ([]Backfill, int, error) {
	var total int
	if err := sqlx.GetContext(ctx, q, &total, `SELECT count(*)`+backfillListFilter, p.DagID, p.State, p.Active); err != nil {
		return nil, 0, fmt.Errorf("count backfills: %w", err)
	}
	order := " AND ($6::text IS NULL OR id > $6::bigint) ORDER BY id"
	if p.Descending {
		order = " AND ($6::text IS NULL OR id < $6::bigint) ORDER BY id DESC"
	}
	backfills := []Backfill{}
	err := sqlx.SelectContext(ctx, q, &backfills, `SELECT `+backfillColumns+backfillListFilter+order+` LIMIT $4 OFFSET $5`,
		p.DagID, p.State, p.Active, p.Limit, p.Offset, p.After)
	if err != nil {
		return nil, 0, fmt.Errorf("list backfills: %w", err)
	}
	return backfills, total, nil
}

// backfillListFilter is BackfillList's FROM and WHERE, for its count and its page.
var backfillListFilter = ` FROM backfills
	WHERE ($1::text IS NULL OR dag_id = $1)
	  AND ($2::text IS NULL OR state = $2)
	  AND ($3::boolean IS NULL OR (state IN ` + activeStatesSQL + `) = $3)`

// BackfillSlotsParams pages a backfill's slots.
type BackfillSlotsParams struct {
	BackfillID int64
	Descending bool
	// State, when set, keeps only slots whose record shows this state.
	State *string
	// Blocked, when set, keeps only the slots whose run waits for another (true), or the
	// others (false).
	Blocked *bool
	ListParams
}

// BackfillSlots pages a backfill's slots in sort order. A slot whose run a later backfill took
// over shows the run as it was at the takeover (see backfill_slot_records, migration 00010).
func (s *Store) BackfillSlots(ctx context.Context, p BackfillSlotsParams) ([]BackfillSlot, int64, error) {
	return readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]BackfillSlot, int64, error) {
		return s.backfillSlotsOnce(ctx, q, p)
	})
}

// backfillSlotsOnce is one attempt of BackfillSlots, which sends it again if its session dies.
func (s *Store) backfillSlotsOnce(ctx context.Context, q pgrun.Queryer, p BackfillSlotsParams) ([]BackfillSlot, int64, error) {
	b, err := s.backfillGetOnce(ctx, q, p.BackfillID)
	if err != nil {
		return nil, 0, err
	}
	order := " AND ($4::text IS NULL OR s.sort_ordinal > $4::integer) ORDER BY s.sort_ordinal"
	if p.Descending {
		order = " AND ($4::text IS NULL OR s.sort_ordinal < $4::integer) ORDER BY s.sort_ordinal DESC"
	}
	slots := []BackfillSlot{}
	err = sqlx.SelectContext(ctx, q, &slots, `
		SELECT s.sort_ordinal, s.logical_date, s.dag_run_id, s.run_id, s.state, s.exception_reason, s.attempt, s.note,
			s.blocked_by
		FROM backfill_slot_records s
		WHERE s.backfill_id = $1 AND ($5::text IS NULL OR s.state = $5)
		  AND ($6::boolean IS NULL OR (s.state = 'queued' AND s.blocked_by > 0) IS TRUE = $6)`+order+` LIMIT $2 OFFSET $3`,
		p.BackfillID, p.Limit, p.Offset, p.After, p.State, p.Blocked)
	if err != nil {
		return nil, 0, fmt.Errorf("list slots of backfill %d: %w", p.BackfillID, err)
	}
	// Every slot is counted in exactly one progress counter, so the total needs no count(*).
	return slots, slotTotal(b.Progress, p.State, p.Blocked), nil
}

// slotTotal is how many of a backfill's slots a listing filtered by state and blocked has in
// all: from the progress counters, kept with every run change, so no count(*) is needed.
// Blocked slots are queued ones.
func slotTotal(p Progress, state *string, blocked *bool) int64 {
	all := slotTotalByState(p, state)
	switch {
	case blocked == nil:
		return all
	case *blocked && (state == nil || domain.RunState(*state) == domain.RunQueued):
		return p.Blocked
	case *blocked:
		return 0
	case state == nil || domain.RunState(*state) == domain.RunQueued:
		return all - p.Blocked
	}
	return all
}

// slotTotalByState is how many of a backfill's slots have a state: its progress counter.
func slotTotalByState(p Progress, state *string) int64 {
	if state == nil {
		return p.Total()
	}
	switch domain.RunState(*state) {
	case domain.RunQueued:
		return p.Queued
	case domain.RunRunning:
		return p.Running
	case domain.RunSuccess:
		return p.Success
	case domain.RunFailed:
		return p.Failed
	case domain.RunCanceled:
		return p.Canceled
	}
	return 0
}

// BackfillGetWithETA reads a backfill and its eta_seconds (domain.ETA, from the pace the
// backfill's row counts, migrations/00034, at the database's now): nil while it is not
// running and until its pace is known. It is the status poll, so its statement is prepared
// once per session (hot) and reads nothing but the row.
func (s *Store) BackfillGetWithETA(ctx context.Context, id int64) (Backfill, *float64, error) {
	b, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (Backfill, error) {
		var b Backfill
		var pace paceRow
		dest := append(b.scanDest(), pace.scanDest()...)
		err := s.hot(ctx, q, backfillGetWithETASQL).QueryRowxContext(ctx, backfillGetWithETASQL, id).Scan(dest...)
		if isNoRows(err) {
			return Backfill{}, ErrBackfillNotFound
		}
		if err != nil {
			return Backfill{}, fmt.Errorf("get backfill %d: %w", id, err)
		}
		b.ETA = pace.eta(b)
		return b, nil
	})
	return b, b.ETA, err
}

const backfillGetWithETASQL = `SELECT ` + backfillColumns + `, ` + paceColumns + ` FROM backfills WHERE id = $1`

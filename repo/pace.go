package repo

import (
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/lib/pq"
)

// paceColumns selects what a backfill's ETA is computed from (paceRow): its pace as the
// row counts it (migrations/00034) and the database's now, the one clock.
const paceColumns = `pace_since, eta_last, eta_buckets, backfill_now() AS db_now`

// paceRow is a backfill's pace and the database's now, read with the backfill.
type paceRow struct {
	Since   time.Time     `db:"pace_since"`
	Last    *time.Time    `db:"eta_last"`
	Buckets pq.Int64Array `db:"eta_buckets"`
	Now     time.Time     `db:"db_now"`
}

// scanDest is the row's fields in paceColumns order.
func (p *paceRow) scanDest() []any { return []any{&p.Since, &p.Last, &p.Buckets, &p.Now} }

// eta is b's eta_seconds at the row's now (domain.ETA).
func (p paceRow) eta(b Backfill) *float64 {
	return domain.ETA(b.State, b.Queued+b.Running, domain.Pace{Since: p.Since, Last: p.Last, Buckets: p.Buckets}, p.Now)
}

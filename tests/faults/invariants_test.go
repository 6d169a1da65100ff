//go:build faults

package faults

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/internal/testkit/invariants"
	"github.com/jmoiron/sqlx"
)

// checkInvariants returns every violation of the lifecycle invariants (internal/testkit/invariants)
// and the backfill with the highest running/max_active_runs, for the logs.
func checkInvariants(db *sqlx.DB) (violations []string, peak peakRunning, err error) {
	rep, err := invariants.Check(context.Background(), db)
	return rep.Violations, peakRunning{Running: rep.PeakRunning, Max: rep.PeakMax}, err
}

// peakRunning is a backfill's running runs against its max_active_runs.
type peakRunning struct {
	Running int `db:"running"`
	Max     int `db:"max_active_runs"`
}

func (p peakRunning) ratio() float64 {
	if p.Max == 0 {
		return 0
	}
	return float64(p.Running) / float64(p.Max)
}

// higher keeps the higher of two peaks.
func (p peakRunning) higher(q peakRunning) peakRunning {
	if q.ratio() > p.ratio() || (q.ratio() == p.ratio() && q.Running > p.Running) {
		return q
	}
	return p
}

func (p peakRunning) String() string { return fmt.Sprintf("%d/%d", p.Running, p.Max) }

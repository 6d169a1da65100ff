package repo

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
)

// copyTestSlots plans n daily slots from 2024-01-01.
func copyTestSlots(n int) []domain.PlannedSlot {
	slots := make([]domain.PlannedSlot, n)
	for i := range slots {
		d := time.Date(2024, 1, 1+i, 0, 0, 0, 0, time.UTC)
		slots[i] = domain.PlannedSlot{SortOrdinal: i + 1, LogicalDate: d, IntervalEnd: d.AddDate(0, 0, 1), Action: domain.ActionCreate}
	}
	return slots
}

// The COPY path writes every run and slot when the window is free. When a run for one of its
// dates committed after the window was read, it gives way: the transaction is still usable,
// nothing of the COPY is left, and the insert path then finds exactly that date taken.
func TestCopyNewRunsGivesWayToARunThatAppeared(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	ctx := context.Background()
	_, err := db.Exec(`INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('copy', '@daily', 'UTC', 16, false, now(), now())`)
	require.NoError(t, err)
	p := domain.BackfillRequest{DagID: "copy"}
	slots := copyTestSlots(5)
	runs := func(q sqlx.QueryerContext, backfillID int64) (n, linked int) {
		require.NoError(t, sqlx.GetContext(ctx, q, &n, `SELECT count(*) FROM dag_runs WHERE backfill_id = $1`, backfillID))
		require.NoError(t, sqlx.GetContext(ctx, q, &linked, `
			SELECT count(*) FROM backfill_dag_runs s JOIN dag_runs r ON r.id = s.dag_run_id
			WHERE s.backfill_id = $1 AND r.backfill_sort_ordinal = s.sort_ordinal AND r.logical_date = s.logical_date`, backfillID))
		return n, linked
	}

	tx, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	ok, err := copyNewRuns(ctx, tx, 1, p, slots, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	n, linked := runs(tx, 1)
	require.Equal(t, 5, n)
	require.Equal(t, 5, linked, "every slot names its own run")
	require.NoError(t, tx.Commit())

	// A manual run on the 8th, as if committed after the window of the next backfill was read.
	_, err = db.Exec(`INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
		run_type, attempt) VALUES ('copy', 'manual__8', '2024-01-08', '2024-01-08', '2024-01-09', 'success', 'manual', 1)`)
	require.NoError(t, err)
	next := copyTestSlots(10)[5:]
	for i := range next {
		next[i].SortOrdinal = i + 1
	}
	tx, err = db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	ok, err = copyNewRuns(ctx, tx, 2, p, next, time.Now())
	require.NoError(t, err)
	require.False(t, ok)
	n, _ = runs(tx, 2)
	require.Zero(t, n, "nothing of the COPY is left")
	taken, err := insertNewRuns(ctx, tx, 2, p, next, nil, time.Now())
	require.NoError(t, err)
	require.Equal(t, []int{2}, taken, "the 8th is the third slot")
	n, linked = runs(tx, 2)
	require.Equal(t, 4, n)
	require.Equal(t, 4, linked)
}

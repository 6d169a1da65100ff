package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// The insert path of creation: the runs and slot rows of every slot whose date has no run yet.
// Slots whose date had one are settled by settleTakenSlots (backfill_create.go); a large
// creation into an empty window takes the COPY path (backfill_copy.go).

// largeBackfill is the slot count above which creation raises work_mem for its transaction.
const largeBackfill = 10000

// insertNewRuns inserts a queued run for every slot whose date has none, with its slot row,
// in one statement: the slots are parallel arrays, unnested, so 100,000 slots cost one round
// trip. Slots whose date known says has a run are not tried (a reprocess of 100,000 runs
// would otherwise pay for 100,000 conflicts); the others are inserted blindly, and a run that
// appeared since known was read shows as a conflict. It returns the indexes (into slots) of
// the slots whose date already had a run.
func insertNewRuns(ctx context.Context, tx *sqlx.Tx, backfillID int64, p domain.BackfillRequest, slots []domain.PlannedSlot, known runDates, now time.Time) ([]int, error) {
	var try []int
	for i, sl := range slots {
		if !known[sl.LogicalDate.UnixMicro()] {
			try = append(try, i)
		}
	}
	got := make([]bool, len(slots))
	if len(try) > 0 {
		linked, err := insertRunsAndSlots(ctx, tx, backfillID, p, slots, try, now)
		if err != nil {
			return nil, err
		}
		if linked == nil {
			for _, i := range try {
				got[i] = true
			}
		}
		for _, ord := range linked {
			got[ord-1] = true // ordinals are 1..N in slice order
		}
	}
	var taken []int
	for i := range got {
		if !got[i] {
			taken = append(taken, i)
		}
	}
	return taken, nil
}

// insertRunsAndSlots is the statement of insertNewRuns for the slots at indexes try. It
// returns nil when every one got a run, else the ordinals of those that did.
func insertRunsAndSlots(ctx context.Context, tx *sqlx.Tx, backfillID int64, p domain.BackfillRequest, slots []domain.PlannedSlot, try []int, now time.Time) (pq.Int64Array, error) {
	n := len(try)
	ordinals := make(pq.Int64Array, n)
	dates := make(pq.StringArray, n)
	ends := make(pq.StringArray, n)
	runIDs := make(pq.StringArray, n)
	blocked := make(pq.Int64Array, n)
	for j, i := range try {
		sl := slots[i]
		blocked[j] = int64(sl.BlockedBy)
		ordinals[j] = int64(sl.SortOrdinal)
		dates[j] = sl.LogicalDate.Format(time.RFC3339Nano)
		ends[j] = sl.IntervalEnd.Format(time.RFC3339Nano)
		runIDs[j] = RunIDFor(domain.RunTypeBackfill, sl.LogicalDate)
	}
	// The slot rows are made from the run insert's own RETURNING (no join back to the
	// parameters), and the final SELECT reads the statement's own results, not a table: it
	// tells which slots got a run without reading dag_runs. In the common case every slot got
	// one, and only the count comes back; otherwise the linked ordinals too.
	var res struct {
		Linked   int           `db:"linked"`
		Ordinals pq.Int64Array `db:"ordinals"`
	}
	err := sqlx.GetContext(ctx, tx, &res, `
		WITH created AS (
			INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
				run_type, backfill_id, backfill_sort_ordinal, conf, attempt, queued_at, blocked_by)
			SELECT $6, s.run_id, s.logical_date, s.logical_date, s.interval_end, 'queued',
				'backfill', $1, s.sort_ordinal, $7::jsonb, 1, $8, s.blocked_by
			FROM unnest($2::int[], $3::timestamptz[], $4::timestamptz[], $5::text[], $9::int[])
				AS s(sort_ordinal, logical_date, interval_end, run_id, blocked_by)
			ON CONFLICT (dag_id, logical_date) DO NOTHING
			RETURNING id, backfill_sort_ordinal, logical_date
		), linked AS (
			INSERT INTO backfill_dag_runs (backfill_id, sort_ordinal, logical_date, dag_run_id)
			SELECT $1, backfill_sort_ordinal, logical_date, id FROM created
			RETURNING sort_ordinal
		)
		SELECT count(*) AS linked,
			CASE WHEN count(*) < cardinality($2::int[]) THEN array_agg(sort_ordinal) END AS ordinals
		FROM linked`,
		backfillID, ordinals, dates, ends, runIDs, p.DagID, JSON(p.DagRunConf), now, blocked)
	if c := uniqueViolation(err); c == constraintRunIDPerDag || c == constraintRunPerDate {
		// ON CONFLICT guards only its arbiter, and only against rows committed before the
		// check: a concurrent creation that commits the same date in between surfaces as a
		// unique violation on either index. Retried, the creation sees that run (or that
		// backfill) and decides as usual.
		return nil, fmt.Errorf("%w: %v", errConcurrentRunForDate, err)
	}
	if err != nil {
		if isRunKeyViolation(err) {
			// A concurrent creation inserted the same run (same date, same run_id) and
			// committed while this statement waited on it: ON CONFLICT arbitrates the
			// date only, so the run_id index can raise this instead. Like a serialization
			// failure, it is run again from a fresh snapshot, which sees the winner.
			return nil, fmt.Errorf("insert runs and slots: %w: %w", errConcurrentRunForDate, err)
		}
		return nil, fmt.Errorf("insert runs and slots: %w", err)
	}
	if res.Linked == n {
		return nil, nil
	}
	if res.Ordinals == nil {
		res.Ordinals = pq.Int64Array{} // none linked: not nil, which means all
	}
	return res.Ordinals, nil
}

// isRunKeyViolation reports a unique violation of one of the keys of a DAG's runs.
func isRunKeyViolation(err error) bool {
	c := uniqueViolation(err)
	return c == constraintRunPerDate || c == constraintRunIDPerDag
}

// runDates is a set of logical dates (Unix microseconds) that have a run.
type runDates map[int64]bool

// existingRunDates reads which dates of the plan's window already have a run of the DAG. It
// runs just before each attempt's creating transaction, on purpose: under SERIALIZABLE a read
// of the DAG's key range would take predicate locks that make creations for neighbouring DAGs
// abort each other. It is only a hint (see insertNewRuns); a range scan of one index, it costs
// little when the window is empty, the common case.
func (s *Store) existingRunDates(ctx context.Context, q pgrun.Queryer, dagID string, plan []domain.PlannedSlot) (runDates, error) {
	first, last := domain.Window(plan)
	var dates []time.Time
	err := sqlx.SelectContext(ctx, q, &dates, `
		SELECT logical_date FROM dag_runs WHERE dag_id = $1 AND logical_date BETWEEN $2 AND $3`, dagID, first, last)
	if err != nil {
		// A read: nothing was written, so the attempt may run again on a fresh session.
		return nil, pgrun.Resendable(fmt.Errorf("read existing runs of %q: %w", dagID, err))
	}
	known := make(runDates, len(dates))
	for _, d := range dates {
		known[d.UnixMicro()] = true
	}
	return known, nil
}

package repo

import (
	"context"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/stretchr/testify/require"
)

// A scan for a filter that matches rarely looks at most Rows rows of the outbox per
// statement and answers a position past them, so that paging by Next finds the one match
// in ceil(n/Rows) bounded statements instead of one statement that walks the whole outbox.
func TestEventScanLooksAtABoundedStepAndMovesPastWhatItSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := oneConnectionStore(t)
	// Enough events that the planner walks the primary key for a range of them, as it does at
	// the outbox's real sizes (a table of a few thousand rows is read whole: cheaper there).
	for range 6 { // a transaction writes at most 4,096 events
		otherEvents(t, db, 4000)
	}
	id := createBackfill(t, db, "rare") // its backfill.created is the one match
	for range 6 {
		otherEvents(t, db, 4000)
	}
	var last int64
	require.NoError(t, db.Get(&last, `SELECT max(id) FROM events`))

	dag, failed := "rare", domain.EventBackfillFailed
	const rows = 5000
	// No match at all: each statement looks at rows rows (and the position's few), moves on.
	after, steps := int64(0), 0
	for {
		before := eventRowsRead(t, db)
		page, err := s.EventScan(ctx, EventScanParams{After: after, Limit: 100, Rows: rows, Type: &failed})
		require.NoError(t, err)
		read := eventRowsRead(t, db) - before
		require.LessOrEqual(t, read, int64(2*rows+10), "events rows read by one statement")
		require.Empty(t, page.Events)
		if page.Held {
			// A transaction of another database (a parallel test's) ended while the horizon
			// was read, which then counts it: a reader asks again, as here.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		require.Greater(t, page.Next, after, "the position moves past the rows looked at")
		after, steps = page.Next, steps+1
		if page.End {
			break
		}
	}
	require.Equal(t, last, after, "the last position is the last event")
	require.Equal(t, 10, steps, "48,001 rows in steps of 5,000")

	// The DAG filter finds its one event along the way, in one of those steps.
	var found []domain.Event
	for after = 0; ; {
		page, err := s.EventScan(ctx, EventScanParams{After: after, Limit: 100, Rows: rows, DagID: &dag})
		require.NoError(t, err)
		found = append(found, page.Events...)
		after = page.Next
		if page.End && !page.Held {
			break
		}
	}
	require.Len(t, found, 1)
	require.Equal(t, id, found[0].BackfillID)
	require.NotEmpty(t, found[0].Data)

	// A full page stops at its last event, not past the rows after it.
	page, err := s.EventScan(ctx, EventScanParams{After: 0, Limit: 10, Rows: rows})
	require.NoError(t, err)
	require.Len(t, page.Events, 10)
	require.Equal(t, page.Events[9].ID, page.Next)
	require.False(t, page.End)
}

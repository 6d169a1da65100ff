package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Event is one row of the outbox. Events are written only by the triggers of
// migrations/00007_events_writer.sql, in the transaction of the change they report; Data is
// stored in its API form ({"backfill": <as GET answers it>, ...}) and served as it is.
type Event struct {
	ID         int64            `db:"id"`
	Type       domain.EventType `db:"type"`
	BackfillID int64            `db:"backfill_id"`
	DagID      string           `db:"dag_id"`
	OccurredAt time.Time        `db:"occurred_at"`
	Data       JSON             `db:"data"`
}

const eventColumns = `id, type, backfill_id, dag_id, occurred_at, data`

// eventColumnsOf is eventColumns qualified by a table alias, for joins.
func eventColumnsOf(alias string) string {
	return alias + ".id, " + alias + ".type, " + alias + ".backfill_id, " + alias + ".dag_id, " +
		alias + ".occurred_at, " + alias + ".data"
}

// EventListParams selects events after a cursor.
type EventListParams struct {
	// After is the last id the reader has seen (0 for the beginning).
	After      int64
	Limit      int
	BackfillID *int64
	Type       *domain.EventType
}

// EventList answers events with id > After in id order. Paging by id never skips an event:
// ids are taken in commit order (see the migration), so one statement's snapshot holds every
// committed event below the largest id it sees.
func (s *Store) EventList(ctx context.Context, p EventListParams) ([]Event, error) {
	return eventList(ctx, s.db, p)
}

func eventList(ctx context.Context, q sqlx.QueryerContext, p EventListParams) ([]Event, error) {
	events := []Event{}
	err := sqlx.SelectContext(ctx, q, &events, `
		SELECT `+eventColumns+` FROM events
		WHERE id > $1 AND ($2::bigint IS NULL OR backfill_id = $2) AND ($3::text IS NULL OR type = $3)
		ORDER BY id LIMIT $4`,
		p.After, p.BackfillID, p.Type, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return events, nil
}

// EventLastID is the largest event id committed so far (0 when none): where a listener that
// starts now begins.
func (s *Store) EventLastID(ctx context.Context) (int64, error) {
	var id int64
	if err := sqlx.GetContext(ctx, s.db, &id, `SELECT coalesce(max(id), 0) FROM events`); err != nil {
		return 0, fmt.Errorf("last event id: %w", err)
	}
	return id, nil
}

// SweepPruneEvents deletes up to batch events older than maxAge (the contract keeps them at
// least 7 days). Readers are unaffected: pruning only ever removes the oldest ids.
func (s *Store) SweepPruneEvents(ctx context.Context, maxAge time.Duration, batch int) (int, error) {
	return s.prune(ctx, pruneEvents, maxAge, batch)
}

// BackfillProgressMany reads the given backfills (those that exist) with the database's now,
// for the progress of event streams: one query for every backfill a replica's streams follow.
func (s *Store) BackfillProgressMany(ctx context.Context, ids []int64) ([]Backfill, time.Time, error) {
	var rows []struct {
		Backfill
		Now time.Time `db:"db_now"`
	}
	err := sqlx.SelectContext(ctx, s.db, &rows,
		`SELECT backfill_now() AS db_now, `+backfillColumns+` FROM backfills WHERE id = ANY($1)`, pq.Int64Array(ids))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read progress of %d backfills: %w", len(ids), err)
	}
	out := make([]Backfill, len(rows))
	var now time.Time
	for i, r := range rows {
		out[i], now = r.Backfill, r.Now
	}
	return out, now, nil
}

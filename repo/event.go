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

// eventColumnsOf reads an event of the table aliased alias as the API sends it. Its data is
// rendered here, from the backfill's row the writer stored
// (migrations/00015_events_lean_writer.sql): the writer pays for a copy of the row, readers
// for the document.
func eventColumnsOf(alias string) string {
	return eventKeyColumnsOf(alias) + ", event_data(" + alias + ") AS data"
}

// eventKeyColumnsOf reads an event's columns but its data. A group's event has no backfill
// (0 and "" in domain.Event); a member's carries its group_id in its snapshot.
func eventKeyColumnsOf(alias string) string {
	return alias + ".id, " + alias + ".type, coalesce(" + alias + ".backfill_id, 0) AS backfill_id, coalesce(" +
		alias + ".dag_id, '') AS dag_id, coalesce(" + alias + ".group_id, (" + alias + ".snapshot).group_id) AS group_id, " +
		alias + ".occurred_at"
}

// EventListParams selects events after a cursor.
type EventListParams struct {
	// After is the last id the reader has seen (0 for the beginning).
	After      int64
	Limit      int
	BackfillID *int64
	Type       *domain.EventType
	// Wait is how long the read may wait for events that have committed but are not yet
	// servable (an older transaction of the database is still in flight): a reader that asks
	// right after its own change sees it, unless that transaction outlasts Wait. Zero answers
	// at once; the reader gets them on its next read.
	Wait time.Duration
	// DataOnlyFor, when not nil, renders data only for the events of these backfills; the
	// others come without it (nil Data). A reader that follows a few backfills but counts
	// every event (the event hub) pays for the documents it sends, not for every one.
	DataOnlyFor []int64
}

// EventList answers events with id > After in id order, only below the horizon (see
// migrations/00014_events_without_lock.sql): every event still to come has a larger id than
// any it answers, so paging by id never skips one.
func (s *Store) EventList(ctx context.Context, p EventListParams) ([]domain.Event, error) {
	events, _, err := s.EventPage(ctx, p)
	return events, err
}

// EventPage is EventList that also says whether the page stopped at the horizon with
// committed events after it still held back, Wait having run out before the older
// transaction ended: a reader that must hand them on soon reads again shortly, instead of at
// its next wake-up.
func (s *Store) EventPage(ctx context.Context, p EventListParams) (events []domain.Event, held bool, err error) {
	deadline := time.Now().Add(p.Wait)
	for attempt := 0; ; attempt++ {
		err = s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) (err error) {
			events, held, err = s.eventList(ctx, q, p)
			return err
		})
		if err != nil || !held || len(events) == p.Limit || !time.Now().Before(deadline) {
			return events, held, err
		}
		if err := sleepCtx(ctx, min(time.Until(deadline), eventHeldBackoff(attempt))); err != nil {
			return events, held, nil
		}
	}
}

// eventHeldBackoff paces the reads that wait for held events: a transaction that writes
// events usually ends within milliseconds, and one that does not should cost few reads.
func eventHeldBackoff(attempt int) time.Duration {
	return min(2*time.Millisecond<<min(attempt, 6), 100*time.Millisecond)
}

// eventList reads one page and cuts it at the horizon of the same snapshot. held says that the
// page went on past the horizon: committed events are waiting for an older transaction. The
// exact horizon reads pg_stat_activity, so it is computed only then; otherwise the snapshot's
// xmin (which is at most the horizon) already admits the whole page. Its statements are hot:
// the event hub runs one at every poll.
func (s *Store) eventList(ctx context.Context, q sqlx.QueryerContext, p EventListParams) (events []domain.Event, held bool, err error) {
	var rows []struct {
		domain.Event
		// Rendered is the event's data, NULL when DataOnlyFor left it out (a
		// json.RawMessage cannot take a NULL).
		Rendered []byte `db:"rendered"`
		Horizon  int64  `db:"horizon"`
	}
	var dataOnlyFor any // NULL: render every event's data
	if p.DataOnlyFor != nil {
		dataOnlyFor = pq.Int64Array(p.DataOnlyFor)
	}
	stmt, args := eventPageSQL, []any{p.After, p.Type, p.Limit, dataOnlyFor}
	if p.BackfillID != nil {
		stmt, args = backfillEventPageSQL, append(args, *p.BackfillID)
	}
	err = sqlx.SelectContext(ctx, s.hot(ctx, q, stmt), &rows, stmt, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	events = make([]domain.Event, 0, len(rows))
	for _, r := range rows {
		if r.ID >= r.Horizon {
			return events, true, nil
		}
		r.Data = r.Rendered
		events = append(events, r.Event)
	}
	return events, false, nil
}

// eventPageSQL reads one page of every backfill's events, backfillEventPageSQL one of the
// events of backfill $5 (along the primary key from the backfill's bound: backfill_events,
// migrations/00022). $1 is the reader's after, $2 the type (NULL: every type), $3 the page's
// size, $4 the backfills whose events' data the page renders (NULL: every event's). Each
// event comes with the horizon of the same snapshot (eventList).
var (
	eventPageSQL = eventPageStatement(
		`events WHERE id > $1 AND ($2::text IS NULL OR type = $2) ORDER BY id LIMIT $3`)
	backfillEventPageSQL = eventPageStatement(
		`backfill_events($5, $1, CASE WHEN $2::text IS NULL THEN NULL ELSE ARRAY[$2::text] END, $3) AS events`)
)

func eventPageStatement(source string) string {
	return `
	WITH snap AS (SELECT pg_current_snapshot() AS s),
	page AS (
		SELECT ` + eventKeyColumnsOf("events") + `,
			CASE WHEN $4::bigint[] IS NULL OR backfill_id = ANY ($4) THEN event_data(events) END AS rendered
		FROM ` + source + `),
	` + pageBoundCTE + `
	SELECT page.*, bound.horizon
	FROM page, bound
	ORDER BY page.id`
}

// pageBoundCTE is bound, the horizon that cuts the page of events read by the CTEs snap and
// page before it, computed once per page, not per row: the exact horizon reads
// pg_stat_activity, so it is computed only when the page reaches past the snapshot's xmin
// (which is at most the horizon).
const pageBoundCTE = `bound AS MATERIALIZED (
			SELECT CASE
				WHEN coalesce((SELECT max(id) FROM page) < (pg_snapshot_xmin(snap.s)::text::bigint << 12), true)
				THEN pg_snapshot_xmin(snap.s)::text::bigint << 12
				ELSE event_horizon(snap.s) END AS horizon
			FROM snap)`

// EventLastID is the largest servable event id so far (0 when none): where a listener that
// starts now begins, and where one without streams moves to at every poll. Below the
// snapshot's xmin is below the horizon.
func (s *Store) EventLastID(ctx context.Context) (int64, error) {
	id, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (id int64, err error) {
		err = sqlx.GetContext(ctx, s.hot(ctx, q, eventLastIDSQL), &id, eventLastIDSQL)
		return id, err
	})
	if err != nil {
		return 0, fmt.Errorf("last event id: %w", err)
	}
	return id, nil
}

// eventLastIDSQL is prepared (Store.hot): every replica without streams runs it at every poll,
// and planning it over the partitions costs more than its run.
const eventLastIDSQL = `
	SELECT coalesce(max(id), 0) FROM outbox
	WHERE id < pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 12`

// TerminalEventStored reports whether the backfill's terminal event, with an id above
// after, is in the outbox, servable or not: a stream of a terminal backfill whose replay did
// not reach it knows from this that an older transaction still holds it back (and waits for
// it), rather than that retention pruned it (and ends).
func (s *Store) TerminalEventStored(ctx context.Context, backfillID, after int64) (bool, error) {
	stored, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (stored bool, err error) {
		err = sqlx.GetContext(ctx, q, &stored, `
			SELECT EXISTS (SELECT 1 FROM backfill_events($1, $2, $3, 1))`,
			backfillID, after, pq.StringArray{string(domain.EventBackfillSucceeded), string(domain.EventBackfillFailed), string(domain.EventBackfillCanceled)})
		return stored, err
	})
	if err != nil {
		return false, fmt.Errorf("find terminal event of backfill %d: %w", backfillID, err)
	}
	return stored, nil
}

// eventsMayBeWritten tells Config.OnEvents that a change that may have written events is over
// (committed or not: a needless wake-up costs one read of the outbox). The methods that can
// change a backfill's state or settings call it; the others never write events.
func (s *Store) eventsMayBeWritten() {
	if s.onEvents != nil {
		s.onEvents()
	}
	// Every change that writes a backfill's events may also make its runs claimable (a
	// creation, an unpause, a raised limit).
	s.claimableMayHaveChanged()
}

// claimableMayHaveChanged tells Config.OnClaimable that a change that may have made runs
// claimable is over (committed or not: a needless wake-up costs each waiting claim one
// claim).
func (s *Store) claimableMayHaveChanged() {
	if s.onClaimable != nil {
		s.onClaimable()
	}
}

// BackfillProgressMany reads the given backfills (those that exist) with the database's now,
// for the progress of event streams: one query for every backfill a replica's streams follow.
func (s *Store) BackfillProgressMany(ctx context.Context, ids []int64) ([]Backfill, time.Time, error) {
	var rows []struct {
		Backfill
		paceRow
	}
	err := s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) error {
		return sqlx.SelectContext(ctx, q, &rows,
			`SELECT `+backfillColumns+`, `+paceColumns+` FROM backfills WHERE id = ANY($1)`, pq.Int64Array(ids))
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read progress of %d backfills: %w", len(ids), err)
	}
	out := make([]Backfill, len(rows))
	var now time.Time
	for i, r := range rows {
		out[i], now = r.Backfill, r.Now
		out[i].ETA = r.paceRow.eta(r.Backfill)
	}
	return out, now, nil
}

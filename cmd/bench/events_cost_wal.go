package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/backfillsvc/backfill/repo"
)

// P12 (a): the WAL a settings change writes with its event and without it. Apart from the
// reads because it alone needs pg_walinspect and a replication slot, and shares nothing with
// them but the backfills' shape (events_cost_shared.go).

// walType is one resource manager/record type of a WAL window: its records and their bytes,
// record_size (full-page images excluded) and the images' apart.
type walType struct {
	Name  string `db:"name"`
	Count int64  `db:"count"`
	Bytes int64  `db:"bytes"`
	FPI   int64  `db:"fpi"`
}

func walBytes(ts []walType) (n int64) {
	for _, t := range ts {
		n += t.Bytes
	}
	return n
}

// changeAloneSQL is BackfillPatch's statement without the INSERT of its event, from the repo
// itself: the change alone, the baseline of (a). Raising settings_revision tells the deferred
// settings trigger that the statement wrote the event, so that it writes none.
var changeAloneSQL = repo.BackfillPatchWithoutEventSQL()

// walWindowSQL sums the WAL records between $1 and $2 that this database wrote, by type:
// pg_walinspect reads the server's WAL, which other databases write too (other tests on the
// same server), so a record counts when it touches a block of this database ($3, its oid) or
// belongs to a transaction that did (its COMMIT). record_length - fpi_length is
// pg_get_wal_stats' record_size: the record without its full-page images, which come with the
// first change of a page after a checkpoint, not with every change.
const walWindowSQL = `
	WITH r AS MATERIALIZED (
		SELECT xid::text AS xid, resource_manager || '/' || record_type AS name,
			record_length - fpi_length AS bytes, fpi_length AS fpi,
			coalesce(block_ref LIKE '%/' || $3 || '/%', false) AS here
		FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)),
	ours AS (SELECT DISTINCT xid FROM r WHERE here AND xid <> '0')
	SELECT name, count(*) AS count, sum(bytes) AS bytes, sum(fpi) AS fpi
	FROM r WHERE here OR xid IN (SELECT xid FROM ours)
	GROUP BY name ORDER BY sum(bytes) DESC`

// walOf runs changes and answers this database's WAL records meanwhile, by type. The window
// ends at the insert position after the changes; pg_walinspect reads only flushed WAL, so it
// waits for the flush to pass it (asynchronous commits leave it behind by up to
// wal_writer_delay).
func walOf(ctx context.Context, db *sqlx.DB, dbOID string, changes func() error) ([]walType, error) {
	var start, end string
	if err := db.GetContext(ctx, &start, `SELECT pg_current_wal_insert_lsn()::text`); err != nil {
		return nil, err
	}
	if err := changes(); err != nil {
		return nil, err
	}
	if err := db.GetContext(ctx, &end, `SELECT pg_current_wal_insert_lsn()::text`); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var flushed bool
		if err := db.GetContext(ctx, &flushed, `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, end); err != nil {
			return nil, err
		}
		if flushed {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("WAL not flushed to %s within 30 s", end)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var types []walType
	err := db.SelectContext(ctx, &types, walWindowSQL, start, end, dbOID)
	return types, err
}

// eventWAL is (a): rounds of changes of max_active_runs over the backfills, each round one
// side with its event (repo BackfillPatch) and one without (changeAloneSQL), the side that
// opens alternating. Each side must write exactly its events: one per change, or none.
func (b *bench) eventWAL(ctx context.Context, s *repo.Store, db *sqlx.DB, res *eventsCostResult) error {
	sz := res.sizes
	if _, err := db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		res.walErr = err // the other parts need no extension
		return nil
	}
	var dbOID string
	if err := db.GetContext(ctx, &dbOID, `SELECT oid::text FROM pg_database WHERE datname = current_database()`); err != nil {
		return err
	}
	release, err := b.holdWAL(ctx, db)
	if err != nil {
		res.walErr = err
		return nil
	}
	defer release()
	c := &p12Changer{s: s, db: db, ids: make([]int64, sz.backfills), seq: make([]int, sz.backfills)}
	for i := range c.ids {
		var err error
		if c.ids[i], err = p12Backfill(ctx, s, fmt.Sprintf("p12_w%d", i)); err != nil {
			return err
		}
	}
	// A warm-up of each side (plans, the prepared statement, the pages), not counted.
	for _, withEvent := range []bool{true, false} {
		if err := c.changes(ctx, withEvent, len(c.ids)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	sums := map[bool]map[string]walType{true: {}, false: {}} // by side, every round's records
	for r := range sz.walRounds {
		eventFirst := r%2 == 0
		for _, withEvent := range []bool{eventFirst, !eventFirst} {
			b.awaitAutovacuum(ctx) // no vacuum of this database in the window
			var before, after int64
			if err := db.GetContext(ctx, &before, `SELECT count(*) FROM outbox`); err != nil {
				return err
			}
			types, err := walOf(ctx, db, dbOID, func() error { return c.changes(ctx, withEvent, sz.changes) })
			if err != nil {
				return err
			}
			if err := db.GetContext(ctx, &after, `SELECT count(*) FROM outbox`); err != nil {
				return err
			}
			if want := int64(sz.changes); !withEvent && after != before || withEvent && after-before != want {
				return fmt.Errorf("%d changes (with events: %v) wrote %d events", sz.changes, withEvent, after-before)
			}
			for _, t := range types {
				acc := sums[withEvent][t.Name]
				acc.Name, acc.Count, acc.Bytes, acc.FPI = t.Name, acc.Count+t.Count, acc.Bytes+t.Bytes, acc.FPI+t.FPI
				sums[withEvent][t.Name] = acc
			}
			per := float64(walBytes(types)) / float64(sz.changes)
			if withEvent {
				res.walWith = append(res.walWith, per)
			} else {
				res.walWithout = append(res.walWithout, per)
			}
		}
		b.log.Printf("P12 WAL round %d, %d changes a side: with its event %.1f B/change, alone %.1f B/change (%.2f×)",
			r+1, sz.changes, res.walWith[r], res.walWithout[r], res.walRatios()[r])
	}
	changes := float64(sz.changes * sz.walRounds)
	for _, withEvent := range []bool{true, false} {
		ts := slices.SortedFunc(maps.Values(sums[withEvent]), func(a, b walType) int { return int(b.Bytes - a.Bytes) })
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = fmt.Sprintf("%s %.2f × %.1f B (FPI %.1f B)", t.Name,
				float64(t.Count)/changes, float64(t.Bytes)/float64(max(t.Count, 1)), float64(t.FPI)/changes)
		}
		b.log.Printf("P12 WAL records of this database per change (records × bytes each), %s, all rounds: %s",
			map[bool]string{true: "with its event", false: "the change alone"}[withEvent], strings.Join(parts, "; "))
	}
	return nil
}

// holdWAL keeps the server from recycling the WAL that (a) reads until release: a temporary
// physical replication slot, reserving from now, on a session of its own (a checkpoint during
// a round otherwise removed the segment where the round began: "requested WAL segment ... has
// already been removed"). The slot goes with its session if the bench dies.
func (b *bench) holdWAL(ctx context.Context, db *sqlx.DB) (release func(), err error) {
	conn, err := db.Connx(ctx)
	if err != nil {
		return nil, err
	}
	var slot string
	err = conn.GetContext(ctx, &slot, `SELECT slot_name FROM pg_create_physical_replication_slot(current_database(), true, true)`)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("a slot to hold the WAL: %w", err)
	}
	return func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			b.log.Printf("P12 drop replication slot %s: %v", slot, err)
		}
		conn.Close()
	}, nil
}

// p12Changer makes (a)'s changes: 4 clients, each changing its own backfills in turn to a new
// value every time (each backfill's counter), so that every change is one.
type p12Changer struct {
	s   *repo.Store
	db  *sqlx.DB
	ids []int64
	seq []int
}

func (c *p12Changer) changes(ctx context.Context, withEvent bool, n int) error {
	const clients = 4
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for cl := range clients {
		wg.Go(func() {
			for i := cl; i < n && errs[cl] == nil; i += clients {
				k := (i/clients)%(len(c.ids)/clients)*clients + cl
				c.seq[k]++
				errs[cl] = c.change(ctx, withEvent, c.ids[k], c.seq[k]%900+1)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *p12Changer) change(ctx context.Context, withEvent bool, id int64, v int) error {
	if withEvent {
		_, err := c.s.BackfillPatch(ctx, repo.BackfillPatchParams{ID: id, MaxActiveRuns: &v})
		return err
	}
	// The other settings are left as they are, as the PATCH of max_active_runs leaves them;
	// the lock wait is LOCK_WAIT's default.
	r, err := c.db.ExecContext(ctx, changeAloneSQL, id, v, false, nil, false, nil, false, nil,
		fmt.Sprint(repo.DefaultLockWait.Milliseconds()), nil)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return fmt.Errorf("the change alone of backfill %d changed %d rows", id, n)
	}
	return nil
}

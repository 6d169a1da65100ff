package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// P12: events' cost (migrations/00037: thin events in an outbox partitioned by id, read by
// backfill through a BRIN bloom index). Three parts on one scratch database of its own,
// through the repo in-process, as P3 and P11 run it: the reads' figures are the database's
// and the repo's, without the HTTP round trip and the JSON encoding of a request.
//
//	(a) WAL per settings change: BackfillPatch of max_active_runs (its UPDATE and its event in
//	    one statement) against the same UPDATE without the event, in WAL record bytes per
//	    change (pg_walinspect, full-page images left out);
//	(b) a backfill's events at 10 million outbox events: one created before a flood of other
//	    backfills' events, one after, and a feed page filtered on a DAG without events;
//	(c) retention: the drop of the flood's partition by the sweep.
const (
	targetEventWAL      = 1.5                    // a change with its event ≤ 1.5 × the change alone
	targetEventRead     = 20 * time.Millisecond  // a backfill's events at 10M outbox events
	targetEventReadOld  = 2.0                    // the backfill before the flood ≤ 2 × the one after
	targetEventDagRead  = 100 * time.Millisecond // a feed page of a DAG without events
	targetPartitionDrop = time.Second            // the sweep pass that drops 10M events
)

// eventCostSizes are P12's sizes; smoke mode shrinks them.
type eventCostSizes struct {
	backfills, changes, walRounds int // (a): backfills changed, changes a side and round, rounds
	flood, floodBackfills         int // (b): events of other backfills, and how many backfills
	reads, oldReads               int // (b): timed reads of each kind, and of the old walk
}

func eventCostSizesOf(cfg config) eventCostSizes {
	if cfg.smoke {
		return eventCostSizes{backfills: 40, changes: 50, walRounds: 1, flood: 20_000, floodBackfills: 300, reads: 5, oldReads: 1}
	}
	return eventCostSizes{backfills: 40, changes: 2_000, walRounds: 5, flood: 10_000_000, floodBackfills: 300, reads: 25, oldReads: 3}
}

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

// eventsCostResult is P12.
type eventsCostResult struct {
	sizes eventCostSizes
	// (a): record bytes per change, a value per round and side; walErr says why (a) was not
	// measured (no pg_walinspect on the server, or no right to a replication slot).
	walWith, walWithout []float64
	walErr              error
	// (b): the reads of backfill A (created before the flood) and B (after): EventList (the
	// SSE replay's read, backfill_events) and EventScan (the JSON pages of GET
	// /backfills/{id}/events and GET /events?backfill_id=), the feed page of a DAG without
	// events, and the walk of the primary key from A's bound that backfill_events made before
	// 00037.
	listA, listB, scanA, scanB, dagScan, oldWalk []time.Duration
	// (c): the sweep pass that dropped the flood's partition, and the rows it took.
	drop    time.Duration
	dropped int64
}

func (r eventsCostResult) walRatios() []float64 {
	out := make([]float64, len(r.walWith))
	for i := range out {
		out[i] = r.walWith[i] / max(r.walWithout[i], 1)
	}
	return out
}

// scenarioEventsCost is P12, on a scratch database of its own, dropped at the end.
func (b *bench) scenarioEventsCost(ctx context.Context, env *scratch) (eventsCostResult, error) {
	res := eventsCostResult{sizes: eventCostSizesOf(b.cfg)}
	dsn, err := env.create(ctx, "p12", true)
	if err != nil {
		return res, err
	}
	defer env.drop(context.WithoutCancel(ctx), dsn)
	db, err := sqlx.Open("postgres", withSessionDefault(dsn, "jit", "off"))
	if err != nil {
		return res, err
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := repo.New(db, repo.Config{})
	if err := b.eventWAL(ctx, s, db, &res); err != nil {
		return res, fmt.Errorf("WAL: %w", err)
	}
	if res.walErr != nil {
		b.log.Printf("P12 WAL not measured: %v", res.walErr)
	}
	flood, err := b.eventReads(ctx, s, db, &res)
	if err != nil {
		return res, fmt.Errorf("reads: %w", err)
	}
	if err := b.partitionDrop(ctx, s, db, &res, flood); err != nil {
		return res, fmt.Errorf("partition drop: %w", err)
	}
	return res, nil
}

// withSessionDefault adds a run-time parameter to a lib/pq URL unless it sets it. P12's
// sessions run with JIT off, as the service's pool sessions do (cmd/api, poolSessionDSN):
// with the server's default (on), every EventScan page of a partitioned outbox compiles its
// statement (55-115 ms here), whose estimate crosses jit_above_cost from two partitions on,
// and P12 would measure a compiler the service's own sessions turn off. -db '...&jit=on'
// measures it.
func withSessionDefault(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	if q.Get(key) == "" {
		q.Set(key, value)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// p12Backfill creates an hourly DAG and its backfill through the repo, with the fields a
// client sets on a real one (a description of about 40 characters, a conf, who and why; the
// repo adds the plan's hash): the UPDATE of (a) rewrites the whole row, so its size is part
// of the change's cost.
func p12Backfill(ctx context.Context, s *repo.Store, dag string) (int64, error) {
	if err := putDag(ctx, s, dag, hourly); err != nil {
		return 0, err
	}
	from, to := hourlyWindow(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), 24)
	req := plainRequest(dag, from, to, 10)
	desc, who, why := "re-run of March after the schema fix #4127", "svc-airflow@example.com", "late partition data from upstream"
	req.Description, req.CreatedBy, req.Reason = &desc, &who, &why
	req.DagRunConf = []byte(`{"source": "s3://lake/raw/events", "full_refresh": true, "regions": ["eu", "us"]}`)
	bf, _, err := s.BackfillCreate(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("backfill of %s: %w", dag, err)
	}
	return bf.ID, nil
}

// changeAloneSQL is BackfillPatch's UPDATE (repo/backfill_patch.go, backfillPatchStatement)
// with its SET list as it is, without the INSERT of its event: the change alone, the
// baseline of (a). Raising settings_revision tells the deferred settings trigger that the
// statement wrote the event, so that it writes none. $1 id, $2 max_active_runs; the other
// settings are left as they are, as the PATCH of max_active_runs leaves them.
var changeAloneSQL = `
	UPDATE backfills SET
		max_active_runs = coalesce($2, max_active_runs),
		max_failed_runs = CASE WHEN $3 THEN $4 ELSE max_failed_runs END,
		description = CASE WHEN $5 THEN $6 ELSE description END,
		pool = CASE WHEN $7 THEN $8::text ELSE pool END,
		priority = coalesce($9::smallint, priority),
		settings_revision = settings_revision + 1,
		updated_at = backfill_change_time(updated_at)
	WHERE id = $1 AND state IN ` + activeStates() + `
		AND coalesce($2, max_active_runs) IS DISTINCT FROM max_active_runs`

func activeStates() string {
	q := make([]string, len(domain.ActiveBackfillStates))
	for i, st := range domain.ActiveBackfillStates {
		q[i] = "'" + string(st) + "'"
	}
	return "(" + strings.Join(q, ", ") + ")"
}

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
	r, err := c.db.ExecContext(ctx, changeAloneSQL, id, v, false, nil, false, nil, false, nil, nil)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return fmt.Errorf("the change alone of backfill %d changed %d rows", id, n)
	}
	return nil
}

// cutEventPartitionSQL is internal/testkit/pgtest's CutEventPartition (the bench imports no
// test kit): it ends the outbox partition that takes the next events at the next transaction
// id, and a new partition takes the rest of its range.
const cutEventPartitionSQL = `DO $$
	DECLARE
		cut constant bigint := (pg_current_xact_id()::text::bigint + 1) << 12;
		p outbox_partitions;
	BEGIN
		SELECT * INTO STRICT p FROM outbox_partitions WHERE lo < cut AND hi > cut;
		EXECUTE format('ALTER TABLE outbox DETACH PARTITION %I', p.name);
		EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', p.name,
			CASE WHEN p.name = 'events_legacy' THEN 'MINVALUE' ELSE p.lo::text END, cut);
		EXECUTE format('CREATE TABLE %I PARTITION OF outbox FOR VALUES FROM (%s) TO (%s)', 'outbox_p' || cut, cut, p.hi);
		UPDATE outbox_partitions SET hi = cut WHERE name = p.name;
		INSERT INTO outbox_partitions (name, lo, hi, created_at, created_xid)
		VALUES ('outbox_p' || cut, cut, p.hi, clock_timestamp(), cut >> 12);
	END $$`

// floodSQL writes events $2..$3-1 of the flood: thin backfill.updated rows, as the PATCH
// writes them, of $4 backfills that do not exist, interleaved as a busy outbox's are (each
// 16-page range of the bloom index holds every one of them), with ids of transaction $1 on.
const floodSQL = `
	INSERT INTO outbox (id, kind, backfill_id, occurred_at, state, max_active_runs, priority,
		num_queued, num_running, num_success, num_failed, num_canceled, num_skipped, num_blocked)
	SELECT ($1::bigint << 12) + g, event_kind('backfill.updated'), 1000000000 + g % $4, now(), 'running', 10, 0,
		200, 10, 700, 3, 0, 0, 0
	FROM generate_series($2::bigint, $3::bigint - 1) g`

// fillOutbox writes n events of other backfills whose ids lie after every event so far and
// before every one written later, in a partition of their own, as tests/events_bounded_test.go
// fills it: the ids of transactions that it first runs and ends empty (a transaction writes
// 4,096 events at most), so that they are below the horizon of every reader. The current
// partition is cut before those transactions and after them. Answers the flood's partition.
func (b *bench) fillOutbox(ctx context.Context, db *sqlx.DB, n, backfills int) (string, error) {
	if _, err := db.ExecContext(ctx, cutEventPartitionSQL); err != nil {
		return "", fmt.Errorf("cut before the flood: %w", err)
	}
	conn, err := db.Connx(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var first, xid int64
	if err := conn.GetContext(ctx, &first, `SELECT pg_current_xact_id()::text::bigint`); err != nil {
		return "", err
	}
	// Other databases take transaction ids too: run until the flood's last one has gone by.
	for last := first + int64(n-1)>>12; xid <= last; {
		if err := conn.GetContext(ctx, &xid, `SELECT pg_current_xact_id()::text::bigint`); err != nil {
			return "", err
		}
	}
	if _, err := db.ExecContext(ctx, cutEventPartitionSQL); err != nil {
		return "", fmt.Errorf("cut after the flood's ids: %w", err)
	}
	start := time.Now()
	const chunk = 1_000_000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			return "", err
		}
		// A bulk load: its commit need not wait for the disk.
		if _, err := tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`); err == nil {
			_, err = tx.ExecContext(ctx, floodSQL, first, lo, hi, backfills)
		}
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			_ = tx.Rollback()
			return "", fmt.Errorf("flood rows %d-%d: %w", lo, hi, err)
		}
		if n > chunk {
			b.log.Printf("P12 flood: %d of %d events written (%v)", hi, n, time.Since(start).Round(time.Second))
		}
	}
	var name string
	err = conn.GetContext(ctx, &name, `SELECT name FROM outbox_partitions WHERE lo <= $1 AND hi > $2`,
		first<<12, first<<12+int64(n)-1)
	b.log.Printf("P12 flood of %d events of %d backfills in partition %s, written in %v", n, backfills, name,
		time.Since(start).Round(100*time.Millisecond))
	return name, err
}

// p12Events creates a backfill with three events: its creation and two PATCHes.
func p12Events(ctx context.Context, s *repo.Store, dag string) (int64, error) {
	id, err := p12Backfill(ctx, s, dag)
	if err != nil {
		return 0, err
	}
	for _, v := range []int{3, 4} {
		if _, err := s.BackfillPatch(ctx, repo.BackfillPatchParams{ID: id, MaxActiveRuns: &v}); err != nil {
			return 0, err
		}
	}
	return id, nil
}

var p12Types = []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillUpdated, domain.EventBackfillUpdated}

func eventTypesOf(evs []domain.Event) []domain.EventType {
	out := make([]domain.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// eventReads is (b): backfill A and its events, the flood, backfill B and its events, a
// sweep pass (which summarizes the bloom index of the closed partitions), ANALYZE; then
// rounds of the reads, interleaved (each read once a round, after a round of warm-up), each
// checked; then the walk of the primary key from A's bound that backfill_events made before
// 00037, for comparison. Answers the flood's partition.
func (b *bench) eventReads(ctx context.Context, s *repo.Store, db *sqlx.DB, res *eventsCostResult) (string, error) {
	sz := res.sizes
	a, err := p12Events(ctx, s, "p12_before")
	if err != nil {
		return "", err
	}
	flood, err := b.fillOutbox(ctx, db, sz.flood, sz.floodBackfills)
	if err != nil {
		return "", err
	}
	bb, err := p12Events(ctx, s, "p12_after")
	if err != nil {
		return "", err
	}
	quiet := "p12_quiet" // a DAG without backfills, so without events
	if err := putDag(ctx, s, quiet, hourly); err != nil {
		return "", err
	}
	start := time.Now()
	pass, err := s.SweepEventPartitions(ctx, repo.EventPartitionParams{})
	if err != nil {
		return "", err
	}
	if _, err := db.ExecContext(ctx, `ANALYZE outbox`); err != nil {
		return "", err
	}
	b.log.Printf("P12 sweep pass (%d partitions created, %d closed, %d summarized) and ANALYZE in %v",
		pass.Created, pass.Closed, pass.Summarized, time.Since(start).Round(100*time.Millisecond))
	// What a read of the backfill before the flood looks at: the flood's bloom filters.
	var sizes struct {
		Heap  int64 `db:"heap"`
		Bloom int64 `db:"bloom"`
	}
	if err := db.GetContext(ctx, &sizes, `
		SELECT pg_relation_size(c.oid) AS heap, coalesce(sum(pg_relation_size(i.indexrelid)), 0) AS bloom
		FROM pg_class c LEFT JOIN pg_index i ON i.indrelid = c.oid
			AND (SELECT amname FROM pg_am a JOIN pg_class ic ON ic.relam = a.oid WHERE ic.oid = i.indexrelid) = 'brin'
		WHERE c.oid = $1::regclass GROUP BY c.oid`, flood); err != nil {
		return "", err
	}
	b.log.Printf("P12 the flood's partition: %.0f MB of rows, a bloom index of %.2f MB", float64(sizes.Heap)/1e6, float64(sizes.Bloom)/1e6)

	list := func(id int64) func() error {
		return func() error {
			evs, err := s.EventList(ctx, repo.EventListParams{Limit: 100, BackfillID: &id})
			if err == nil && !slices.Equal(eventTypesOf(evs), p12Types) {
				err = fmt.Errorf("EventList of backfill %d: %v, want %v", id, eventTypesOf(evs), p12Types)
			}
			return err
		}
	}
	scan := func(id *int64, dag *string, want []domain.EventType) func() error {
		return func() error {
			p, err := s.EventScan(ctx, repo.EventScanParams{Limit: 100, BackfillID: id, DagID: dag})
			if err == nil && !slices.Equal(eventTypesOf(p.Events), want) {
				err = fmt.Errorf("EventScan: %v, want %v", eventTypesOf(p.Events), want)
			}
			return err
		}
	}
	reads := []struct {
		read func() error
		into *[]time.Duration
	}{
		{list(a), &res.listA}, {list(bb), &res.listB},
		{scan(&a, nil, p12Types), &res.scanA}, {scan(&bb, nil, p12Types), &res.scanB},
		{scan(nil, &quiet, []domain.EventType{}), &res.dagScan},
	}
	for r := range sz.reads + 1 { // round 0 warms up
		for _, rd := range reads {
			start := time.Now()
			if err := rd.read(); err != nil {
				return "", err
			}
			if r > 0 {
				*rd.into = append(*rd.into, time.Since(start))
			}
		}
	}
	b.log.Printf("P12 reads at %s events (median of %d): backfill before the flood %s (EventList), %s (EventScan); after %s, %s; a DAG without events %s",
		count(sz.flood), sz.reads, dur(median(res.listA)), dur(median(res.scanA)), dur(median(res.listB)), dur(median(res.scanB)), dur(median(res.dagScan)))
	// Round by round: events_scan is PL/pgSQL, whose statements a session plans for their
	// parameters' values five times, then may keep a generic plan; the rounds show which.
	b.log.Printf("P12 EventScan of the backfill before the flood, round by round (the warm-up was the session's first call): %s", durs(res.scanA))
	b.log.Printf("P12 EventScan of the DAG without events, round by round: %s", durs(res.dagScan))

	// The walk before 00037 (backfill_events of 00022): the primary key from the backfill's
	// bound, every event after it looked at. One warm-up, then the timed walks.
	for r := range sz.oldReads + 1 {
		start := time.Now()
		n, err := oldWalk(ctx, db, a)
		if err != nil {
			return "", err
		}
		if n != len(p12Types) {
			return "", fmt.Errorf("the old walk found %d events of backfill %d, want %d", n, a, len(p12Types))
		}
		if r > 0 {
			res.oldWalk = append(res.oldWalk, time.Since(start))
		}
	}
	b.log.Printf("P12 the walk of the primary key from the bound of the backfill before the flood (before 00037): %s (median of %d)",
		dur(median(res.oldWalk)), len(res.oldWalk))
	return flood, nil
}

func durs(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = dur(d)
	}
	return strings.Join(out, ", ")
}

// oldWalk reads backfill id's events as backfill_events did before 00037: along the primary
// key from its bound, without the bloom index.
func oldWalk(ctx context.Context, db *sqlx.DB, id int64) (int, error) {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if _, err = tx.ExecContext(ctx, `SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off`); err == nil {
		err = tx.GetContext(ctx, &n, `
			SELECT count(*) FROM (
				SELECT o.id FROM outbox o
				WHERE o.id >= (SELECT b.events_from FROM backfills b WHERE b.id = $1) AND o.backfill_id = $1
				ORDER BY o.id LIMIT 100) s`, id)
	}
	return n, err
}

// partitionDrop is (c): the flood's partition, closed by the sweep in (b), is made expired by
// setting its close 8 days back (the service's clock is not moved: the other partitions stay
// within retention), and the sweep pass with a retention of 7 days is timed. Its table must be
// gone and the outbox smaller by the flood, the events of A and B still there.
func (b *bench) partitionDrop(ctx context.Context, s *repo.Store, db *sqlx.DB, res *eventsCostResult, flood string) error {
	var before, inFlood int64
	if err := db.GetContext(ctx, &before, `SELECT count(*) FROM outbox`); err != nil {
		return err
	}
	if err := db.GetContext(ctx, &inFlood, `SELECT count(*) FROM `+pq.QuoteIdentifier(flood)); err != nil {
		return err
	}
	if inFlood != int64(res.sizes.flood) {
		return fmt.Errorf("partition %s holds %d events, want the flood's %d", flood, inFlood, res.sizes.flood)
	}
	r, err := db.ExecContext(ctx, `UPDATE outbox_partitions SET closed_at = backfill_now() - interval '8 days'
		WHERE name = $1 AND closed_at IS NOT NULL`, flood)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return fmt.Errorf("the sweep did not close partition %s", flood)
	}
	b.awaitAutovacuum(ctx)
	start := time.Now()
	pass, err := s.SweepEventPartitions(ctx, repo.EventPartitionParams{Retention: 7 * 24 * time.Hour})
	res.drop = time.Since(start)
	if err != nil {
		return err
	}
	var gone bool
	var after int64
	if err := db.GetContext(ctx, &gone, `SELECT to_regclass($1) IS NULL AND NOT EXISTS (SELECT 1 FROM outbox_partitions WHERE name = $1)`, flood); err != nil {
		return err
	}
	if err := db.GetContext(ctx, &after, `SELECT count(*) FROM outbox`); err != nil {
		return err
	}
	res.dropped = before - after
	if pass.Dropped != 1 || !gone || res.dropped != inFlood {
		return fmt.Errorf("the pass dropped %d partitions (want 1), %s gone: %v, the outbox lost %d events (want %d)",
			pass.Dropped, flood, gone, res.dropped, inFlood)
	}
	var left int64
	if err := db.GetContext(ctx, &left, `SELECT count(*) FROM outbox o JOIN backfills b ON b.id = o.backfill_id
		WHERE b.dag_id IN ('p12_before', 'p12_after')`); err != nil {
		return err
	}
	if left != 2*int64(len(p12Types)) {
		return fmt.Errorf("after the drop backfills A and B have %d events, want %d", left, 2*len(p12Types))
	}
	b.log.Printf("P12 the sweep pass dropped %s (%d events) in %v", flood, res.dropped, res.drop.Round(time.Millisecond))
	return nil
}

func eventsCostRows(r eventsCostResult) []row {
	var rows []row
	if r.walErr != nil {
		rows = append(rows, row{"P12 WAL per PATCH of max_active_runs with its event vs the change alone",
			"not measured: " + r.walErr.Error(), "—", "—", fmt.Sprintf("≤ %.1f", targetEventWAL), "—"})
	}
	if len(r.walWith) > 0 {
		ratios := r.walRatios()
		rows = append(rows, row{
			fmt.Sprintf("P12 WAL per PATCH of max_active_runs with its event vs the change alone (pg_walinspect record bytes, FPI excluded; median of %d rounds of %s)",
				len(ratios), count(r.sizes.changes)),
			fmt.Sprintf("%.0f B/change", median(r.walWith)), fmt.Sprintf("%.0f B/change alone", median(r.walWithout)),
			spread(ratios), fmt.Sprintf("≤ %.1f", targetEventWAL), verdict(median(ratios) <= targetEventWAL)})
	}
	if len(r.listA) > 0 {
		n := count(r.sizes.flood)
		for _, p := range []struct {
			what string
			a, b []time.Duration
		}{{"EventList: SSE replay, backfill_events", r.listA, r.listB}, {"EventScan: JSON pages of GET /backfills/{id}/events, /events?backfill_id=", r.scanA, r.scanB}} {
			a, b := median(p.a), median(p.b)
			rows = append(rows,
				row{fmt.Sprintf("P12 a backfill's events at %s outbox events, created before them (%s; median of %d)", n, p.what, len(p.a)),
					dur(a), "—", "—", "≤ " + dur(targetEventRead), verdict(a <= targetEventRead)},
				row{fmt.Sprintf("P12 the same, backfill created before the %s vs after (%s)", n, p.what),
					dur(a), dur(b) + " after", ratioStr(float64(a) / float64(max(b, 1))),
					fmt.Sprintf("≤ %.1f", targetEventReadOld), verdict(float64(a) <= targetEventReadOld*float64(b))})
		}
		d := median(r.dagScan)
		rows = append(rows, row{fmt.Sprintf("P12 GET /events?dag_id= of a DAG without events at %s outbox events (EventScan; median of %d)", n, len(r.dagScan)),
			dur(d), "—", "—", "≤ " + dur(targetEventDagRead), verdict(d <= targetEventDagRead)})
		if len(r.oldWalk) > 0 {
			rows = append(rows, row{fmt.Sprintf("P12 the backfill before the %s: bloom index (EventList) vs the walk of the primary key from its bound before 00037 (information)", n),
				dur(median(r.listA)), dur(median(r.oldWalk)) + " walk", ratioStr(float64(median(r.listA)) / float64(max(median(r.oldWalk), 1))), "—", "—"})
		}
	}
	if r.dropped > 0 {
		rows = append(rows, row{fmt.Sprintf("P12 retention: the sweep pass dropping the partition of %s events (DETACH CONCURRENTLY + DROP TABLE)", count(int(r.dropped))),
			dur(r.drop), "—", "—", "< " + dur(targetPartitionDrop), verdict(r.drop < targetPartitionDrop)})
	}
	return rows
}

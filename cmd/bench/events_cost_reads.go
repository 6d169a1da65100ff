package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/ctxwait"
	"github.com/backfillsvc/backfill/repo"
)

// P12 (b): a backfill's events read past the 10M flood (events_cost_flood.go), and the walk
// of the primary key that 00022 made, for comparison.

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
				// A transaction of another database on the same server (a test of another
				// package, under make test) may hold the horizon below the events for a
				// moment, and EventScan answers what is servable without waiting: waited
				// out, then the read is timed anew.
				if err := untilNoError(ctx, 15*time.Second, rd.read); err != nil {
					return "", err
				}
				start = time.Now()
				if err := rd.read(); err != nil {
					return "", err
				}
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

// untilNoError runs read until it answers no error, every 50 ms, for at most limit; it answers
// the last error past that.
func untilNoError(ctx context.Context, limit time.Duration, read func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := read()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		if !ctxwait.Sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

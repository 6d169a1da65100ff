package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/backfillsvc/backfill/events"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/sweeper"
)

// P12 (d): the held-out read check, through the service's own code paths. (b) floods
// the outbox by bulk INSERT, in a partition of its own, summarized whole by a sweep pass
// before it is read: the way to 10 million events in seconds, but not the way a service's
// outbox fills. Here the flood is what a service writes: one other backfill's PATCHes, each
// its own transaction and its own thin event, in the partition that takes every event, whose
// bloom index only the summarizer (sweeper.Summarizer, every second, as cmd/api starts it)
// summarizes as the pages fill. So A's read meets what it would meet in the service: the
// summarized ranges of the flood and the open partition's unsummarized tail.

// heldOutWriters is how many clients PATCH the other backfill at once. Their values are
// disjoint (heldOutValue), which holds for at most 9 of them: see there.
const heldOutWriters = 8

// eventPageLimit and eventPageScanBudget are GET /backfills/{id}/events' page without
// limit=: api/openapi.yaml's default limit, and handlers.eventPageBudget, the time a JSON page
// may spend scanning (unexported there, so copied).
const (
	eventPageLimit      = 50
	eventPageScanBudget = 250 * time.Millisecond
)

// eventReplayBatch and eventReplayFor are a stream's replay read (events.Reader.streamRead,
// unexported): events.replayBatch and events.streamReadFor.
const (
	eventReplayBatch = 500
	eventReplayFor   = 5 * time.Second
)

// heldOutResult is (d).
type heldOutResult struct {
	changes  int           // event-writing PATCHes of the other backfill C
	writing  time.Duration // how long they took, the 8 clients together
	xids     int64         // transaction ids between A's bound and B's: A's read's range
	passes   int64         // the summarizer's calls meanwhile
	summed   int64         // partitions those calls summarized, counted each time
	sumErrs  int64         // calls that failed (the service logs the first and goes on)
	pages    int64         // the open partition's heap pages when the reads began
	sumUpTo  int64         // of them, the ones its bloom index had summarized
	reads    int           // reads of each kind, A and B alternating
	summTail []int64       // unsummarized pages at each round's start (the summarizer runs on)
	// The reads of A (created before the flood) and B (after): the JSON page of GET
	// /backfills/{id}/events (BackfillGet, then events.Reader.Read as readEventPage runs it;
	// pageScan is the Read alone), a stream's replay (events.Reader.Read gated, as streamRead),
	// and repo.Store.EventList by backfill (backfill_events).
	pageA, pageB, pageScanA, pageScanB, replayA, replayB, listA, listB []time.Duration
}

// heldOutValue is the max_active_runs that client g sets at its k-th change: values of g's
// own residue mod heldOutWriters, cycling through 1000 / heldOutWriters of them. A change
// writes its event only when it changes something, and this one always does: the row holds
// either g's previous value (a different one of the cycle) or another client's (another
// residue). The backfill's first value, 10, is client 1's second, never its first: this holds
// for heldOutWriters ≤ 9, where 10 is no client's first value.
func heldOutValue(g, k int) int {
	cycle := 1000 / heldOutWriters // max_active_runs is 1..1000 (backfills_max_active_runs_valid)
	return heldOutWriters*(k%cycle) + g + 1
}

// heldOutReads is (d), on a scratch database of its own, as a fresh service's: the
// summarizer started as cmd/api starts it; backfill A with its three events (p12Events);
// backfill C; sz.heldChanges PATCHes of C's max_active_runs by heldOutWriters clients, each a
// new value, so each writes an event; backfill B with A's three events; then sz.heldReads
// rounds, each reading A then B by each read, checked. No sweep pass, no ANALYZE, no warm-up.
// The service also sweeps every 5 s, but in a fresh database the pass would attach nothing
// (the first partition is 4M transactions wide), close only the empty events_legacy, which no
// read here looks at, and summarize as the summarizer does: leaving it out changes nothing
// the reads meet. Autovacuum, which would analyze the partition, is the server's business.
func (b *bench) heldOutReads(ctx context.Context, env *scratch, res *eventsCostResult) error {
	sz := res.sizes
	h := &res.held
	dsn, err := env.create(ctx, "p12h", true)
	if err != nil {
		return err
	}
	defer env.drop(context.WithoutCancel(ctx), dsn)
	db, err := sqlx.Open("postgres", withSessionDefault(dsn, "jit", "off"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := repo.New(db, repo.Config{})

	// The service's summarizer itself, its calls counted: store.SummarizeEventTail every
	// second (sweeper.DefaultSummarizeInterval), until the reads are done.
	summ := sweeper.NewSummarizer(func(ctx context.Context) (int, error) {
		n, err := s.SummarizeEventTail(ctx)
		atomic.AddInt64(&h.passes, 1)
		atomic.AddInt64(&h.summed, int64(n))
		if err != nil {
			atomic.AddInt64(&h.sumErrs, 1)
		}
		return n, err
	}, 0, nil)
	if err := summ.Start(ctx); err != nil {
		return err
	}
	defer summ.Stop()

	a, err := p12Events(ctx, s, "p12h_before")
	if err != nil {
		return err
	}
	c, err := p12Backfill(ctx, s, "p12h_other")
	if err != nil {
		return err
	}
	start := time.Now()
	if err := heldOutFlood(ctx, s, c, sz.heldChanges); err != nil {
		return err
	}
	h.writing, h.changes = time.Since(start), sz.heldChanges
	var ofC int
	if err := db.GetContext(ctx, &ofC, `SELECT count(*) FROM outbox WHERE backfill_id = $1`, c); err != nil {
		return err
	}
	if ofC != sz.heldChanges+1 { // its creation, then one a change
		return fmt.Errorf("backfill C has %d events after %d changes, want %d", ofC, sz.heldChanges, sz.heldChanges+1)
	}
	b.log.Printf("P12 held-out: %s PATCHes of backfill C by %d clients in %v (%.0f/s), the summarizer called %d times meanwhile",
		thousands(sz.heldChanges), heldOutWriters, h.writing.Round(100*time.Millisecond),
		float64(sz.heldChanges)/h.writing.Seconds(), atomic.LoadInt64(&h.passes))
	bb, err := p12Events(ctx, s, "p12h_after")
	if err != nil {
		return err
	}
	if err := db.GetContext(ctx, &h.xids, `SELECT ((SELECT events_from FROM backfills WHERE id = $2)
		- (SELECT events_from FROM backfills WHERE id = $1)) >> 12`, a, bb); err != nil {
		return err
	}

	reader := events.NewReader(s, 0, 0) // the replica's reader, as handlers.NewRouter makes it
	page := func(id int64, total, scan *[]time.Duration) func() error {
		return func() error {
			start := time.Now()
			// GetBackfillEvents: the backfill first (a 404 otherwise), then the page.
			if _, err := s.BackfillGet(ctx, id); err != nil {
				return err
			}
			mid := time.Now()
			read, err := reader.Read(ctx, 0, eventPageLimit, events.Filter{BackfillID: &id}, start.Add(eventPageScanBudget), false)
			end := time.Now()
			if err == nil && (read.Held || !slices.Equal(eventTypesOf(read.Events), p12Types)) {
				// readEventPage would wait for held events; nothing is in flight here.
				err = fmt.Errorf("JSON page of backfill %d: %v (held %v), want %v", id, eventTypesOf(read.Events), read.Held, p12Types)
			}
			*total, *scan = append(*total, end.Sub(start)), append(*scan, end.Sub(mid))
			return err
		}
	}
	replay := func(id int64, into *[]time.Duration) func() error {
		return func() error {
			start := time.Now()
			read, err := reader.Read(ctx, 0, eventReplayBatch, events.Filter{BackfillID: &id}, start.Add(eventReplayFor), true)
			*into = append(*into, time.Since(start))
			if err == nil && !slices.Equal(eventTypesOf(read.Events), p12Types) {
				err = fmt.Errorf("replay of backfill %d: %v, want %v", id, eventTypesOf(read.Events), p12Types)
			}
			return err
		}
	}
	list := func(id int64, into *[]time.Duration) func() error {
		return func() error {
			start := time.Now()
			evs, err := s.EventList(ctx, repo.EventListParams{Limit: eventPageLimit, BackfillID: &id})
			*into = append(*into, time.Since(start))
			if err == nil && !slices.Equal(eventTypesOf(evs), p12Types) {
				err = fmt.Errorf("EventList of backfill %d: %v, want %v", id, eventTypesOf(evs), p12Types)
			}
			return err
		}
	}
	reads := []func() error{
		page(a, &h.pageA, &h.pageScanA), page(bb, &h.pageB, &h.pageScanB),
		replay(a, &h.replayA), replay(bb, &h.replayB),
		list(a, &h.listA), list(bb, &h.listB),
	}
	h.reads = sz.heldReads
	for r := range sz.heldReads {
		tail, err := openTail(ctx, db)
		if err != nil {
			return err
		}
		if r == 0 {
			h.pages, h.sumUpTo = tail.Pages, tail.Summarized
		}
		h.summTail = append(h.summTail, tail.Pages-tail.Summarized)
		for _, rd := range reads {
			if err := rd(); err != nil {
				return err
			}
		}
	}
	summ.Stop()
	b.log.Printf("P12 held-out: A's read spans %s transactions; the open partition had %d pages, %d summarized, when the reads began; unsummarized pages at each round: %v",
		thousands(int(h.xids)), h.pages, h.sumUpTo, h.summTail)
	b.log.Printf("P12 held-out reads (median of %d, A / B): JSON page %s / %s (its events.Reader.Read alone %s / %s), replay %s / %s, EventList %s / %s; summarizer: %d calls, %d partition summaries, %d failed",
		sz.heldReads, dur(median(h.pageA)), dur(median(h.pageB)), dur(median(h.pageScanA)), dur(median(h.pageScanB)),
		dur(median(h.replayA)), dur(median(h.replayB)), dur(median(h.listA)), dur(median(h.listB)),
		h.passes, h.summed, h.sumErrs)
	b.log.Printf("P12 held-out JSON page of A, round by round: %s", durs(h.pageA))
	b.log.Printf("P12 held-out JSON page of B, round by round: %s", durs(h.pageB))
	return nil
}

// heldOutFlood makes n PATCHes of backfill c's max_active_runs through repo.Store.BackfillPatch,
// heldOutWriters clients at once, each change a new value (heldOutValue): the flood of the
// held-out check, every event written as the service writes it.
func heldOutFlood(ctx context.Context, s *repo.Store, c int64, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, heldOutWriters)
	for g := range heldOutWriters {
		wg.Go(func() {
			for i := g; i < n; i += heldOutWriters {
				v := heldOutValue(g, i/heldOutWriters)
				if _, err := s.BackfillPatch(ctx, repo.BackfillPatchParams{ID: c, MaxActiveRuns: &v}); err != nil {
					errs[g] = fmt.Errorf("PATCH %d of backfill %d: %w", i, c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// outboxTail is the open partition's size in heap pages, and how many of them its bloom index
// has summarized (outbox_partitions.summarized_to).
type outboxTail struct {
	Pages      int64 `db:"pages"`
	Summarized int64 `db:"summarized"`
}

// openTail reads outboxTail of the partition that takes new events (the one not closed with
// the highest range; there is one in a fresh database).
func openTail(ctx context.Context, db *sqlx.DB) (outboxTail, error) {
	var t outboxTail
	err := db.GetContext(ctx, &t, `
		SELECT pg_relation_size(name::regclass) / current_setting('block_size')::bigint AS pages,
			greatest(summarized_to, 0) AS summarized
		FROM outbox_partitions WHERE closed_at IS NULL ORDER BY hi DESC LIMIT 1`)
	return t, err
}

// thousands prints 41305 as 41,305.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func heldOutRows(h heldOutResult) []row {
	if len(h.pageA) == 0 {
		return nil
	}
	n := thousands(h.changes)
	var rows []row
	for _, p := range []struct {
		what string
		a, b []time.Duration
	}{
		{"JSON page of GET /backfills/{id}/events: BackfillGet + events.Reader, EventScan", h.pageA, h.pageB},
		{"SSE replay: events.Reader gated, EventScan", h.replayA, h.replayB},
		{"EventList by backfill: backfill_events", h.listA, h.listB},
	} {
		a, b := median(p.a), median(p.b)
		rows = append(rows,
			row{fmt.Sprintf("P12 held-out: a backfill's events after %s PATCHes of another backfill, created before them (%s; median of %d)", n, p.what, len(p.a)),
				dur(a), "—", "—", "≤ " + dur(targetEventRead), verdict(a <= targetEventRead)},
			row{fmt.Sprintf("P12 held-out: the same, backfill created before the %s vs after (%s)", n, p.what),
				dur(a), dur(b) + " after", ratioStr(float64(a) / float64(max(b, 1))),
				fmt.Sprintf("≤ %.1f", targetEventReadOld), verdict(float64(a) <= targetEventReadOld*float64(b))})
	}
	return rows
}

package handlers

import (
	"context"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// Every read of the outbox by a request or a stream is a sequence of bounded steps
// (repo.EventScan: at most repo.DefaultEventScanRows rows looked at per statement), so that a
// filter that matches rarely costs a bounded statement at a time and a position past what it
// looked at, never a walk of the whole outbox in one statement or one request.

// eventPageBudget is the most time a JSON page of events spends scanning the outbox: a page
// whose filters matched less than its limit in that time answers what it found, with
// next_after past the rows it looked at.
const eventPageBudget = 250 * time.Millisecond

// DefaultOutboxScans is how many scanning steps of the outbox the replica runs at once
// (Options.OutboxScans): the streams' replays and the steps of a JSON page after its first
// (a filter that keeps little) share this many connections of the pool, whatever the number
// of streams and pages, and wait their turn. A page's first step, which is all that a reader
// at the outbox's end needs, does not wait: it is an admitted request's one statement.
const DefaultOutboxScans = 1

// eventFilter is what a reader of the outbox keeps.
type eventFilter struct {
	backfillID *int64
	dagID      *string
	typ        *domain.EventType
}

// keeps reports whether ev passes the filter (for events the hub hands on).
func (f eventFilter) keeps(ev domain.Event) bool {
	return (f.backfillID == nil || ev.BackfillID == *f.backfillID) &&
		(f.dagID == nil || ev.DagID == *f.dagID) &&
		(f.typ == nil || ev.Type == *f.typ)
}

// eventRead is what a bounded read found.
type eventRead struct {
	events []domain.Event
	// next is the position to read from next (past rows the filters skipped).
	next int64
	// held: the read stopped at committed events an older transaction holds back.
	held bool
	// end: nothing servable is left after next.
	end bool
}

// readEvents reads up to limit events after `after` that f keeps, a bounded step at a time,
// until the page is full, nothing servable is left, or `until` has passed (checked between
// steps, each one statement of bounded work). Its first step runs at once unless gated;
// the others are scanSteps.
func (s *Server) readEvents(ctx context.Context, after int64, limit int, f eventFilter, until time.Time, gated bool) (eventRead, error) {
	out := eventRead{next: after}
	for step := 0; ; step++ {
		var page repo.EventScanPage
		var err error
		p := repo.EventScanParams{
			After: out.next, Limit: limit - len(out.events), Rows: s.eventScanRows,
			BackfillID: f.backfillID, Type: f.typ, DagID: f.dagID,
		}
		if step == 0 && !gated {
			page, err = s.store.EventScan(ctx, p)
		} else {
			var ran bool
			page, ran, err = s.scanStep(ctx, p, until)
			if !ran {
				return out, err // no turn before until: the page as it is
			}
		}
		if err != nil {
			return out, err
		}
		out.events = append(out.events, page.Events...)
		out.next, out.held, out.end = page.Next, page.Held, page.End
		if len(out.events) >= limit || page.End || !time.Now().Before(until) {
			return out, nil
		}
	}
}

// scanStep runs one step of a scan in its turn among the replica's outbox scans
// (DefaultOutboxScans), then rests in its turn scanRestFactor times as long as the step took
// (until `until` at the most), so that the replica's scans take at most a third of those
// connections' time however many readers want them. ran is false when no turn came before until (or ctx ended).
func (s *Server) scanStep(ctx context.Context, p repo.EventScanParams, until time.Time) (page repo.EventScanPage, ran bool, err error) {
	wait := time.NewTimer(max(time.Until(until), 0))
	defer wait.Stop()
	select {
	case s.outboxScans <- struct{}{}:
	case <-ctx.Done():
		return page, false, ctx.Err()
	case <-wait.C:
		return page, false, nil
	}
	// The turn is held through the rest too: the replica's scans together take at most a third
	// of the turns' time, not each scan its share while the others fill the rest.
	defer func() { <-s.outboxScans }()
	start := time.Now()
	// Bounded by the step's rows already; the timeout also ends it if the database is in
	// trouble, and the context's end cancels it when the client goes.
	qctx, cancel := context.WithTimeout(ctx, scanStepTimeout)
	page, err = s.store.EventScan(qctx, p)
	cancel()
	if err == nil && !page.End {
		rest := time.NewTimer(min(scanRestFactor*time.Since(start), max(time.Until(until), 0)))
		defer rest.Stop()
		select {
		case <-rest.C:
		case <-ctx.Done():
		}
	}
	return page, true, err
}

// scanRestFactor is how much longer than its step a scan rests, in its turn: the replica's
// scans of the outbox take at most a third of the turn's time.
const scanRestFactor = 2

// scanStepTimeout bounds one step of a scan, which looks at most repo.DefaultEventScanRows
// rows: milliseconds, unless the database is in trouble.
const scanStepTimeout = 5 * time.Second

// pageBudgets are a JSON page's time to scan and its time to wait for held events, both
// from the request's start: within the server's statement_timeout together, so that no
// request lasts longer than a single statement may.
func (s *Server) pageBudgets() (scan, wait time.Duration) {
	scan, wait = eventPageBudget, eventReadWait
	if st := s.statementTimeout; st > 0 {
		scan, wait = min(scan, st/4), min(wait, st/2)
	}
	return scan, wait
}

// readEventPage answers a JSON page: a bounded read, then, while committed events are held
// back by an older transaction and the page is not full, reads again after short waits, up
// to the wait budget. It waits outside its admission slot (outsideAdmission): a poller that
// waits for another transaction takes no slot from requests that need the database. A
// slot not given back in time (shed) ends the wait with the page as it is.
func (s *Server) readEventPage(ctx context.Context, after int64, limit int, f eventFilter) (eventRead, error) {
	start := time.Now()
	scanFor, waitFor := s.pageBudgets()
	out, err := s.readEvents(ctx, after, limit, f, start.Add(scanFor), false)
	for attempt := 0; err == nil && out.held && len(out.events) < limit; attempt++ {
		left := time.Until(start.Add(waitFor))
		if left <= 0 || !outsideAdmission(ctx, min(left, eventHeldBackoff(attempt))) {
			break
		}
		var more eventRead
		more, err = s.readEvents(ctx, out.next, limit-len(out.events), f, time.Now().Add(min(scanFor, time.Until(start.Add(waitFor)))), false)
		more.events = append(out.events, more.events...)
		out = more
	}
	if err != nil {
		return eventRead{}, err
	}
	return out, nil
}

// eventHeldBackoff paces the reads of a page that waits for held events: a transaction that
// writes events usually ends within milliseconds, and one that does not should cost few
// reads.
func eventHeldBackoff(attempt int) time.Duration {
	return min(5*time.Millisecond<<min(attempt, 5), 100*time.Millisecond)
}

// streamRead is a stream's read of the outbox: scanSteps (each in its turn among the
// replica's outbox scans, so that the replays of many streams share them) until the batch is
// full, the end, or streamReadFor has passed; a client that leaves stops it within a step.
func (s *Server) streamRead(ctx context.Context, after int64, limit int, f eventFilter) (eventRead, error) {
	return s.readEvents(ctx, after, limit, f, time.Now().Add(streamReadFor), true)
}

// streamReadFor is how long one streamRead goes on before the stream writes what it found
// (a keep-alive's silence is 15 s) and asks again from there.
const streamReadFor = 5 * time.Second

package handlers

import (
	"context"
	"time"

	"github.com/backfillsvc/backfill/events"
)

// eventPageBudget is the most time a JSON page of events spends scanning the outbox: a page
// whose filters matched less than its limit in that time answers what it found, with
// next_after past the rows it looked at.
const eventPageBudget = 250 * time.Millisecond

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

// readEventPage answers a JSON page: a bounded read (events.Reader), then, while committed
// events are held back by an older transaction and the page is not full, reads again after
// short waits, up to the wait budget. It waits outside its admission slot
// (outsideAdmission): a poller that waits for another transaction takes no slot from
// requests that need the database. A slot not given back in time (shed) ends the wait with
// the page as it is.
func (s *Server) readEventPage(ctx context.Context, after int64, limit int, f events.Filter) (events.Read, error) {
	start := time.Now()
	scanFor, waitFor := s.pageBudgets()
	out, err := s.outbox.Read(ctx, after, limit, f, start.Add(scanFor), false)
	for attempt := 0; err == nil && out.Held && len(out.Events) < limit; attempt++ {
		left := time.Until(start.Add(waitFor))
		if left <= 0 || !outsideAdmission(ctx, min(left, eventHeldBackoff(attempt))) {
			break
		}
		var more events.Read
		more, err = s.outbox.Read(ctx, out.Next, limit-len(out.Events), f, time.Now().Add(min(scanFor, time.Until(start.Add(waitFor)))), false)
		more.Events = append(out.Events, more.Events...)
		out = more
	}
	if err != nil {
		return events.Read{}, err
	}
	return out, nil
}

// eventHeldBackoff paces the reads of a page that waits for held events: a transaction that
// writes events usually ends within milliseconds, and one that does not should cost few
// reads.
func eventHeldBackoff(attempt int) time.Duration {
	return min(5*time.Millisecond<<min(attempt, 5), 100*time.Millisecond)
}

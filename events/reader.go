package events

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

// DefaultOutboxScans is how many scanning steps of the outbox the replica runs at once
// (NewReader's scans): the streams' replays and the steps of a JSON page after its first (a
// filter that keeps little) share this many connections of the pool, whatever the number of
// streams and pages, and wait their turn. A page's first step, which is all that a reader at
// the outbox's end needs, does not wait: it is an admitted request's one statement.
const DefaultOutboxScans = 1

// scanRestFactor is how much longer than its step a scan rests, in its turn: the replica's
// scans of the outbox take at most a third of the turn's time.
const scanRestFactor = 2

// scanStepTimeout bounds one step of a scan, which looks at most repo.DefaultEventScanRows
// rows: milliseconds, unless the database is in trouble.
const scanStepTimeout = 5 * time.Second

// streamReadFor is how long one read of a stream goes on before the stream writes what it
// found (a keep-alive's silence is 15 s) and asks again from there.
const streamReadFor = 5 * time.Second

// replayBatch is how many stored events one read of a stream asks for.
const replayBatch = 500

// OutboxStore is what the replica's readers of the outbox read.
type OutboxStore interface {
	EventScan(ctx context.Context, p repo.EventScanParams) (repo.EventScanPage, error)
	BackfillProgressMany(ctx context.Context, ids []int64) ([]repo.Backfill, time.Time, error)
	TerminalEventStored(ctx context.Context, backfillID, after int64) (bool, error)
}

// Filter is what a reader of the outbox keeps; nil fields keep everything.
type Filter struct {
	BackfillID *int64
	DagID      *string
	Type       *domain.EventType
}

// Keeps reports whether ev passes the filter (for events the hub hands on).
func (f Filter) Keeps(ev domain.Event) bool {
	return (f.BackfillID == nil || ev.BackfillID == *f.BackfillID) &&
		(f.DagID == nil || ev.DagID == *f.DagID) &&
		(f.Type == nil || ev.Type == *f.Type)
}

// Read is what a bounded read found.
type Read struct {
	Events []domain.Event
	// Next is the position to read from next (past rows the filters skipped).
	Next int64
	// Held: the read stopped at committed events an older transaction holds back.
	Held bool
	// End: nothing servable is left after Next.
	End bool
}

// Reader reads the outbox in bounded steps, its scans taking turns among the replica's.
type Reader struct {
	store OutboxStore
	rows  int           // the most outbox rows one statement looks at (0: repo's default)
	turns chan struct{} // the replica's scans at once
}

// NewReader returns the replica's reader: rows is the most outbox rows one statement looks
// at (0: repo.DefaultEventScanRows), scans how many scanning steps run at once (0:
// DefaultOutboxScans).
func NewReader(store OutboxStore, rows, scans int) *Reader {
	if scans <= 0 {
		scans = DefaultOutboxScans
	}
	return &Reader{store: store, rows: rows, turns: make(chan struct{}, scans)}
}

// Read reads up to limit events after `after` that f keeps, a bounded step at a time, until
// the page is full, nothing servable is left, or `until` has passed (checked between steps,
// each one statement of bounded work). Its first step runs at once unless gated; the others
// take their turn among the replica's scans (scanStep).
func (r *Reader) Read(ctx context.Context, after int64, limit int, f Filter, until time.Time, gated bool) (Read, error) {
	out := Read{Next: after}
	for step := 0; ; step++ {
		var page repo.EventScanPage
		var err error
		p := repo.EventScanParams{
			After: out.Next, Limit: limit - len(out.Events), Rows: r.rows,
			BackfillID: f.BackfillID, Type: f.Type, DagID: f.DagID,
		}
		if step == 0 && !gated {
			page, err = r.store.EventScan(ctx, p)
		} else {
			var ran bool
			page, ran, err = r.scanStep(ctx, p, until)
			if !ran {
				return out, err // no turn before until: the page as it is
			}
		}
		if err != nil {
			return out, err
		}
		out.Events = append(out.Events, page.Events...)
		out.Next, out.Held, out.End = page.Next, page.Held, page.End
		if len(out.Events) >= limit || page.End || !time.Now().Before(until) {
			return out, nil
		}
	}
}

// scanStep runs one step of a scan in its turn among the replica's outbox scans, then rests
// in its turn scanRestFactor times as long as the step took (until `until` at the most), so
// that the replica's scans take at most a third of those connections' time however many
// readers want them. ran is false when no turn came before until (or ctx ended).
func (r *Reader) scanStep(ctx context.Context, p repo.EventScanParams, until time.Time) (page repo.EventScanPage, ran bool, err error) {
	wait := time.NewTimer(max(time.Until(until), 0))
	defer wait.Stop()
	select {
	case r.turns <- struct{}{}:
	case <-ctx.Done():
		return page, false, ctx.Err()
	case <-wait.C:
		return page, false, nil
	}
	// The turn is held through the rest too: the replica's scans together take at most a third
	// of the turns' time, not each scan its share while the others fill the rest.
	defer func() { <-r.turns }()
	start := time.Now()
	// Bounded by the step's rows already; the timeout also ends it if the database is in
	// trouble, and the context's end cancels it when the client goes.
	qctx, cancel := context.WithTimeout(ctx, scanStepTimeout)
	page, err = r.store.EventScan(qctx, p)
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

// streamRead is a stream's read: gated steps until the batch is full, the end, or
// streamReadFor has passed; a client that leaves stops it within a step.
func (r *Reader) streamRead(ctx context.Context, after int64, f Filter) (Read, error) {
	return r.Read(ctx, after, replayBatch, f, time.Now().Add(streamReadFor), true)
}

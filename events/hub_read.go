package events

// The hub's reads: the outbox for the followed backfills' events, and their progress.

import (
	"context"
	"slices"
	"time"

	"github.com/backfillsvc/backfill/repo"
)

// followedIDs is the backfills some stream follows now (never nil).
func (h *Hub) followedIDs() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.followedLocked()
}

// followedLocked is followedIDs for a caller that holds h.mu.
func (h *Hub) followedLocked() []int64 {
	ids := make([]int64, 0, len(h.subs))
	for id := range h.subs {
		ids = append(ids, id)
	}
	return ids
}

// following says whether a stream is open, and if not, when the last one closed.
func (h *Hub) following() (bool, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count > 0, h.lastEnd
}

// heldWait is how long one read of the outbox waits for committed events that an older
// transaction holds back (repo.EventListParams.Wait). A notification comes right after a
// commit, often before the horizon has passed it; without the wait those events would wait
// for the next notification or poll. Longer holds are left to the loop's reread, so that
// the loop keeps serving progress meanwhile.
const heldWait = 250 * time.Millisecond

// heldRereadMax is the longest the hub waits between reads while events are held back: the
// streams get them within about a second of the older transaction's end, whatever the poll
// interval an operator set, for one read a second while it lasts. Doubling up to the poll
// interval alone, a held event once waited 4-8 s for its stream behind a long poll (a test
// with hour-long polls, on a loaded machine).
const heldRereadMax = time.Second

// nextHeldReread is the wait before the next read while events stay held back, after a wait
// of prev (0 for the first): heldWait, then doubling up to heldRereadMax. The hub and the
// streams pace their reads of held events alike.
func nextHeldReread(prev time.Duration) time.Duration {
	return min(max(2*prev, heldWait), heldRereadMax)
}

// readOutbox reads every event after the cursor and hands each to its backfill's streams,
// while the replica has streams. Only the followed backfills' events are read with their data
// (rendered from the stored row at every read): the others only feed the listener's lag
// metric. Without streams it reads no event: it moves the cursor to the outbox's end, so that
// the first stream to come is not handed a backlog (events are counted by the webhook
// fan-out, once for all replicas). It answers whether the streams' outbox must be read again
// soon: its last read stopped at committed events that an older transaction still holds back,
// or failed (a read that timed out on a busy database must not leave the events to the next
// poll: behind a working LISTEN that is PollInterval away, 2 s by default and as long as an
// operator sets it). Never without streams: nobody waits for those events.
func (h *Hub) readOutbox(ctx context.Context) bool {
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		followed := h.followedIDs()
		if len(followed) == 0 {
			h.skipToEnd(qctx)
			cancel()
			return false
		}
		dataOnlyFor := followed
		if slices.Contains(followed, Everything) {
			dataOnlyFor = nil // a stream of every event needs every event's data
		}
		evs, held, err := h.store.EventPage(qctx, repo.EventListParams{
			After: h.cursor, Limit: h.cfg.Batch, Wait: heldWait, DataOnlyFor: dataOnlyFor})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			h.log.Error("read events", "err", err)
			return true // read again soon, as when events are held back
		}
		h.mu.Lock()
		for _, ev := range evs {
			for _, key := range [2]int64{ev.BackfillID, Everything} {
				for s := range h.subs[key] {
					if ev.Data == nil {
						// Its backfill was not followed when this page was read. A stream that
						// subscribed since may have replayed the outbox before this event could
						// be served: it reads it from the outbox.
						s.lag()
					} else {
						s.push(ev)
					}
				}
			}
		}
		h.mu.Unlock()
		for _, ev := range evs {
			h.obs.EventRead(time.Since(ev.OccurredAt))
			h.cursor = ev.ID
		}
		if len(evs) < h.cfg.Batch {
			return held
		}
	}
	return false
}

// skipToEnd moves the cursor of a replica without streams to the last event that can be served
// (EventLastID: below every transaction still open, so nothing after it is skipped). The read
// is one step down the primary key of the newest partitions, whatever the number of events.
func (h *Hub) skipToEnd(ctx context.Context) {
	last, err := h.store.EventLastID(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Error("read the outbox's end", "err", err)
		}
		return
	}
	if last > h.cursor {
		h.cursor = last
		h.lagNewcomers()
	}
}

// lagNewcomers makes every stream read the outbox itself after the cursor skipped events,
// which it does when no stream was open as the read began: the streams open now subscribed
// during that read, and their replay may have come before some of the events skipped could
// be served (a pause skipped, never sent, and the stream waiting for it).
func (h *Hub) lagNewcomers() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for s := range set {
			s.lag()
		}
	}
}

// readProgress reads the counts of every followed backfill in one query and hands the ones
// that changed to their streams.
func (h *Hub) readProgress(ctx context.Context) {
	h.mu.Lock()
	ids := h.followedLocked()
	for id := range h.progress {
		if _, followed := h.subs[id]; !followed {
			delete(h.progress, id)
		}
	}
	h.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	rows, _, err := h.store.BackfillProgressMany(qctx, ids)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.log.Error("read progress", "err", err)
		}
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range rows {
		p := ProgressOf(b)
		if old, ok := h.progress[b.ID]; ok && old.SameCounts(p) {
			continue
		}
		h.progress[b.ID] = p
		for s := range h.subs[b.ID] {
			s.setProgress(p)
		}
	}
}

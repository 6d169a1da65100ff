package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/backfillsvc/backfill/repo"
)

// claimPollEvery is how often a waiting claim claims again without being woken: what no
// commit announces (a deferred run's time coming, a pace's next start) and a replica that
// cannot LISTEN (behind a transaction pooler) are found this late at the most.
const claimPollEvery = time.Second

// claimRetryFloor is the least wait between two tries of a waiting claim that was not woken:
// a deferral that just ended but whose run stays unclaimable (its backfill paused) is tried
// again this often, for the short while the store still reports it.
const claimRetryFloor = 10 * time.Millisecond

// errShedWhileWaiting: a waiting claim was woken but not admitted again (overload).
var errShedWhileWaiting = errors.New("shed while waiting to claim again")

// claimWaiting claims, and while the claim finds nothing and wait has not passed, waits for
// a wake-up (s.claimWaker: a change on this or another replica that may have made runs
// claimable) or the next poll, then claims again. While it waits it holds no database
// connection (the store's claim has returned) and no admission slot (given back, and taken
// again through the queue like a new request before the next claim). The waker's channel is
// taken before each claim, so a change that commits while the claim runs still wakes it.
//
// A replayed claim (its Idempotency-Key seen before) answers at once: it hands out nothing.
// A waiting claim records its key only with the runs it hands out (KeyOnlyWithRuns).
func (s *Server) claimWaiting(r *http.Request, p repo.RunClaimParams, wait time.Duration) ([]repo.Run, bool, error) {
	ctx := r.Context()
	deadline := time.Now().Add(wait)
	p.KeyOnlyWithRuns = wait > 0
	slot := requestSlot(ctx)
	for {
		var woken, stopping <-chan struct{}
		if s.claimWaker != nil {
			woken, stopping = s.claimWaker.Wait(), s.claimWaker.Stopping()
		}
		runs, replayed, err := s.store.RunClaim(ctx, p)
		left := time.Until(deadline)
		if err != nil || len(runs) > 0 || replayed || left <= 0 || isClosed(stopping) {
			return runs, replayed, err
		}
		next := s.claimNextTry(ctx, p) // before the slot goes: it reads the database
		if slot != nil {
			slot.release()
		}
		t := time.NewTimer(min(left, next))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-stopping:
			t.Stop()
			return runs, false, nil
		case <-woken:
		case <-t.C:
		}
		t.Stop()
		if slot != nil {
			if err := slot.reacquire(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, false, ctx.Err()
				}
				return nil, false, errShedWhileWaiting
			}
		}
	}
}

// isClosed reports whether c (nil: never) is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// claimTimer is implemented by a store that can tell when a run may become claimable without
// a commit announcing it (repo.Store.RunClaimNextChange).
type claimTimer interface {
	RunClaimNextChange(ctx context.Context, p repo.RunClaimParams) (time.Duration, bool, error)
}

// claimNextTry is when a waiting claim that found nothing tries again unless woken first: at
// its next poll, or sooner at the earliest deferral or pace start still ahead (plus a
// millisecond, so that the claim runs at or after that instant by the database's clock).
// The look-up is one round trip per empty try of a waiting claim, never on a claim that
// hands out runs.
func (s *Server) claimNextTry(ctx context.Context, p repo.RunClaimParams) time.Duration {
	next := claimPollEvery
	if ct, ok := s.store.(claimTimer); ok {
		if d, ok, err := ct.RunClaimNextChange(ctx, p); err == nil && ok {
			next = min(next, max(d+time.Millisecond, claimRetryFloor))
		}
	}
	return next
}

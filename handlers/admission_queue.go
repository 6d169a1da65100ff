package handlers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// The admission queue: a small scheduler of slots, after Facebook's "Fail at Scale" (ACM Queue,
// 2015). It tells a burst from overload by how long its queue has been non-empty:
//
//   - Controlled delay (CoDel): a request that arrives while its class's queue has not been
//     empty for a whole interval (a standing queue: the server has been behind for that long)
//     waits at most the short timeout before it is shed; one that arrives at an empty or
//     freshly filled queue (a burst) waits up to the long timeout. A burst is thus served in
//     turn, and only a queue that does not drain sheds, and then quickly.
//   - Adaptive LIFO: while the queue stands, a freed slot goes to the newest waiter, whose
//     client is the likeliest to still be there and to have time left; otherwise to the
//     oldest (first come, first served).
//   - A waiter whose client went away (its context ended) is dropped, never served; a request
//     whose own deadline is nearer than its timeout waits only until then.
//
// Slots live in pools; a class takes one slot in each of its pools, all at once, under one
// mutex, so partial holds cannot happen. Classes are served in priority order when a shared
// pool frees a slot (lease, claim, default).

// admissionClock is the time source of the queue; tests drive a fake one.
type admissionClock interface {
	Now() time.Time
	// Timer returns a channel that receives once d has passed, and a function that stops it.
	Timer(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// slotPool is a number of slots, some in use.
type slotPool struct{ capacity, used int }

// classQueue is one class's waiters, in arrival order, and the pools its requests take.
type classQueue struct {
	pools      []*slotPool
	maxWaiting int
	// lastToShed keeps the long wait even while the queue stands: for requests whose shedding
	// costs more than their wait (a shed heartbeat can cost a run its lease). They still
	// turn LIFO while the queue stands.
	lastToShed bool
	waiters    []*waiter
	// nonEmptySince is when the queue last became non-empty; zero while it is empty.
	nonEmptySince time.Time
}

func (q *classQueue) room() bool {
	for _, p := range q.pools {
		if p.used >= p.capacity {
			return false
		}
	}
	return true
}

func (q *classQueue) take() {
	for _, p := range q.pools {
		p.used++
	}
}

func (q *classQueue) give() {
	for _, p := range q.pools {
		p.used--
	}
}

// standing reports whether the queue has not been empty for the whole last interval.
func (q *classQueue) standing(now time.Time, interval time.Duration) bool {
	return !q.nonEmptySince.IsZero() && now.Sub(q.nonEmptySince) >= interval
}

func (q *classQueue) remove(w *waiter) {
	if i := slices.Index(q.waiters, w); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
	}
	if len(q.waiters) == 0 {
		q.nonEmptySince = time.Time{}
	}
}

type waiter struct {
	ctx   context.Context
	since time.Time     // when it started waiting
	ready chan struct{} // closed when granted or displaced
	// granted and displaced are set under the queue's mutex before ready is closed.
	granted, displaced bool
}

// slotQueue schedules the slots of every class.
type slotQueue struct {
	clock admissionClock
	// interval is how long a queue must have been non-empty to count as standing; short and
	// long are the waits of a request that arrives at a standing queue and at any other.
	interval, short, long time.Duration

	// onWait, when set, is told when a request of a class starts (+1) and stops (-1) waiting.
	onWait func(c, delta int)

	mu      sync.Mutex
	classes []*classQueue // in priority order
}

var (
	// errQueueFull: the class already has maxWaiting requests waiting.
	errQueueFull = errors.New("admission queue full")
	// errWaitedOut: no slot freed up within the request's timeout (or its own deadline).
	errWaitedOut = errors.New("admission wait exceeded")
	// errDisplaced: the request was the oldest of a full, standing queue when a new one came.
	errDisplaced = errors.New("displaced by a newer request at a full standing queue")
)

// acquire takes a slot of class c (an index into classes), waiting as the queue's state
// allows. On success the caller must call release(c) once done.
func (s *slotQueue) acquire(ctx context.Context, c int) error {
	s.mu.Lock()
	q := s.classes[c]
	if len(q.waiters) == 0 && q.room() {
		q.take()
		s.mu.Unlock()
		return nil
	}
	now := s.clock.Now()
	standing := q.standing(now, s.interval) && !q.lastToShed
	if len(q.waiters) >= q.maxWaiting {
		// A full standing queue serves its newest first (dispatch), so its oldest waiter is
		// the least likely to be served: once it has waited half the short wait, a newcomer
		// takes its place and it is shed. Otherwise the newcomer is shed, at no cost. Without
		// this the bottom of a full queue waits out the whole short wait, and the timer's
		// lateness on a busy machine puts the tail of every 503 past ADMISSION_WAIT; displacing
		// every time would cost each shed request a timer and a wake-up (measured: goodput
		// per server CPU-second 0.70 of its value at capacity instead of 0.8–0.97).
		if !standing || len(q.waiters) == 0 || now.Sub(q.waiters[0].since) < s.short/2 {
			s.mu.Unlock()
			return errQueueFull
		}
		oldest := q.waiters[0]
		q.remove(oldest)
		oldest.displaced = true
		close(oldest.ready)
	}
	timeout := s.long
	if standing {
		timeout = s.short
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, dl.Sub(now))
	}
	if timeout <= 0 || ctx.Err() != nil {
		s.mu.Unlock()
		return errWaitedOut
	}
	w := &waiter{ctx: ctx, since: now, ready: make(chan struct{})}
	if len(q.waiters) == 0 {
		q.nonEmptySince = now
	}
	q.waiters = append(q.waiters, w)
	s.mu.Unlock()
	if s.onWait != nil {
		s.onWait(c, 1)
		defer s.onWait(c, -1)
	}

	expired, stop := s.clock.Timer(timeout)
	defer stop()
	var err error
	select {
	case <-w.ready:
		if w.displaced {
			return errDisplaced
		}
		return nil
	case <-expired:
		err = errWaitedOut
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		// Granted while the timer fired: a slot in hand is served, unless nobody waits for
		// the answer any more.
		if ctx.Err() == nil {
			return nil
		}
		q.give()
		s.dispatch()
		return err
	}
	q.remove(w)
	return err
}

// release gives back a slot of class c and hands freed slots to waiters.
func (s *slotQueue) release(c int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.classes[c].give()
	s.dispatch()
}

// dispatch grants free slots to waiters, classes in priority order: the newest waiter of a
// standing queue, else the oldest. Waiters whose client has gone are dropped on the way.
// Called with mu held.
func (s *slotQueue) dispatch() {
	now := s.clock.Now()
	for _, q := range s.classes {
		for len(q.waiters) > 0 && q.room() {
			i := 0
			if q.standing(now, s.interval) {
				i = len(q.waiters) - 1
			}
			w := q.waiters[i]
			q.remove(w)
			if w.ctx.Err() != nil {
				continue // its own goroutine answers nobody and finds itself gone
			}
			q.take()
			w.granted = true
			close(w.ready)
		}
	}
}

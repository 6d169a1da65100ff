package handlers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock that moves only when the test advances it (it starts at the real time,
// so that a context deadline reads the same on both). Every timer it makes is
// announced on armed, so that a test knows a request has started waiting.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	armed  chan time.Duration
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now(), armed: make(chan time.Duration, 64)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	f.mu.Lock()
	c := make(chan time.Time, 1)
	f.timers = append(f.timers, fakeTimer{at: f.now.Add(d), c: c})
	f.mu.Unlock()
	f.armed <- d
	return c, func() {}
}

// advance moves the clock and fires the timers that are due.
func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.at.After(f.now) {
			t.c <- f.now
		} else {
			kept = append(kept, t)
		}
	}
	f.timers = kept
}

const (
	testInterval = 100 * time.Millisecond
	testLong     = time.Second
)

// newTestQueue is one class of capacity slots on a fake clock.
func newTestQueue(capacity int) (*slotQueue, *fakeClock) {
	clock := newFakeClock()
	return &slotQueue{
		clock: clock, interval: testInterval, short: testInterval, long: testLong,
		classes: []*classQueue{{pools: []*slotPool{{capacity: capacity}}, maxWaiting: 100}},
	}, clock
}

// queued starts an acquire that must wait, and returns once it waits, with the timeout it was
// given; its result arrives on the returned channel.
func queued(t *testing.T, s *slotQueue, clock *fakeClock, ctx context.Context, name string, order chan<- string) (time.Duration, <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		err := s.acquire(ctx, 0)
		if err == nil && order != nil {
			order <- name
		}
		done <- err
	}()
	select {
	case d := <-clock.armed:
		return d, done
	case err := <-done:
		t.Fatalf("%s did not wait: %v", name, err)
		return 0, nil
	}
}

// A burst that finds the queue empty (or freshly filled) gets the long wait: it is served in
// turn, first come first served, and nothing is shed though each waits past the short wait.
func TestSlotQueueServesABurstInTurn(t *testing.T) {
	t.Parallel()
	s, clock := newTestQueue(1)
	require.NoError(t, s.acquire(context.Background(), 0))
	order := make(chan string, 3)
	var done []<-chan error
	for _, name := range []string{"a", "b", "c"} {
		d, c := queued(t, s, clock, context.Background(), name, order)
		require.Equal(t, testLong, d, name)
		done = append(done, c)
	}
	// Past the short wait, but the queue is served before it stands for long.
	clock.advance(testInterval / 2)
	releaseServes(t, s, done[0], order, "a")
	clock.advance(testInterval / 4)
	releaseServes(t, s, done[1], order, "b")
	releaseServes(t, s, done[2], order, "c")
}

// Once the queue has not been empty for a whole interval, an arrival gets the short wait and is
// shed when it runs out, while the requests already waiting keep their long one; a freed slot
// goes to the newest waiter (LIFO) while the queue stands.
func TestSlotQueueShedsQuicklyAndServesNewestFirstWhileTheQueueStands(t *testing.T) {
	t.Parallel()
	s, clock := newTestQueue(1)
	require.NoError(t, s.acquire(context.Background(), 0))
	order := make(chan string, 4)
	d, oldest := queued(t, s, clock, context.Background(), "oldest", order)
	require.Equal(t, testLong, d)
	clock.advance(testInterval) // the queue now stands
	d, shed := queued(t, s, clock, context.Background(), "shed", order)
	require.Equal(t, testInterval, d, "an arrival at a standing queue waits the short wait")
	clock.advance(testInterval)
	require.ErrorIs(t, <-shed, errWaitedOut)
	d, newest := queued(t, s, clock, context.Background(), "newest", order)
	require.Equal(t, testInterval, d)
	releaseServes(t, s, newest, order, "newest", "LIFO while the queue stands")
	releaseServes(t, s, oldest, order, "oldest")
	// Drained: the queue is empty again, and the next arrival is a burst once more.
	d, again := queued(t, s, clock, context.Background(), "again", order)
	require.Equal(t, testLong, d)
	s.release(0)
	require.NoError(t, <-again)
}

// A waiter whose client went away is dropped, never served: the slot goes to the next one. A
// request's own deadline shortens its wait, and one already past is not queued at all.
func TestSlotQueueDropsGoneClientsAndHonoursDeadlines(t *testing.T) {
	t.Parallel()
	s, clock := newTestQueue(1)
	require.NoError(t, s.acquire(context.Background(), 0))
	ctx, cancel := context.WithCancel(context.Background())
	_, gone := queued(t, s, clock, ctx, "gone", nil)
	order := make(chan string, 1)
	_, next := queued(t, s, clock, context.Background(), "next", order)
	cancel()
	require.ErrorIs(t, <-gone, context.Canceled)
	releaseServes(t, s, next, order, "next")

	dl, cancelDL := context.WithDeadline(context.Background(), clock.Now().Add(500*time.Millisecond))
	defer cancelDL()
	d, _ := queued(t, s, clock, dl, "deadline", nil)
	require.Equal(t, 500*time.Millisecond, d)

	past, cancelPast := context.WithDeadline(context.Background(), clock.Now().Add(-time.Millisecond))
	defer cancelPast()
	require.ErrorIs(t, s.acquire(past, 0), errWaitedOut)
}

// A class whose queue holds maxWaiting requests sheds the next one at once.
func TestSlotQueueBoundsEachQueue(t *testing.T) {
	t.Parallel()
	s, clock := newTestQueue(1)
	s.classes[0].maxWaiting = 2
	require.NoError(t, s.acquire(context.Background(), 0))
	_, a := queued(t, s, clock, context.Background(), "a", nil)
	_, b := queued(t, s, clock, context.Background(), "b", nil)
	require.ErrorIs(t, s.acquire(context.Background(), 0), errQueueFull)
	s.release(0)
	require.NoError(t, <-a)
	s.release(0)
	require.NoError(t, <-b)
}

// A full queue that stands (LIFO) sheds its oldest waiter when a new request comes, once that
// one has waited half the short wait, and queues the newcomer: the oldest would only have
// waited out its time. Otherwise, and at a full queue that does not stand (a burst, served
// first come, first served), the newcomer is shed.
func TestSlotQueueFullAndStandingShedsItsOldest(t *testing.T) {
	t.Parallel()
	s, clock := newTestQueue(1)
	s.classes[0].maxWaiting = 2
	require.NoError(t, s.acquire(context.Background(), 0))
	order := make(chan string, 2)
	_, a := queued(t, s, clock, context.Background(), "a", order)
	clock.advance(testInterval / 2)
	_, b := queued(t, s, clock, context.Background(), "b", order)
	require.ErrorIs(t, s.acquire(context.Background(), 0), errQueueFull, "not standing yet")
	clock.advance(testInterval / 2) // the queue now stands; a has waited the interval, b half
	_, c := queued(t, s, clock, context.Background(), "c", order)
	require.ErrorIs(t, <-a, errDisplaced, "the oldest makes room at once")
	clock.advance(testInterval / 4) // b has waited 3/4 of the interval, c a quarter
	_, d := queued(t, s, clock, context.Background(), "d", order)
	require.ErrorIs(t, <-b, errDisplaced)
	require.ErrorIs(t, s.acquire(context.Background(), 0), errQueueFull,
		"the oldest (c) has waited less than half the short wait")
	releaseServes(t, s, d, order, "d", "the newest is served first")
	releaseServes(t, s, c, order, "c")
}

// Classes that share a pool: a freed slot goes to the first class in priority order that has a
// waiter and room in all its pools; a class's own pool keeps the other's reserve.
func TestSlotQueueSharesPoolsByPriority(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	main, dflt := &slotPool{capacity: 2}, &slotPool{capacity: 1}
	s := &slotQueue{clock: clock, interval: testInterval, short: testInterval, long: testLong,
		classes: []*classQueue{
			{pools: []*slotPool{main}, maxWaiting: 10},
			{pools: []*slotPool{main, dflt}, maxWaiting: 10},
		}}
	require.NoError(t, s.acquire(context.Background(), 1)) // a read: main 1/2, default 1/1
	require.NoError(t, s.acquire(context.Background(), 0)) // a claim takes the reserve: main 2/2
	readDone := make(chan error, 1)
	go func() { readDone <- s.acquire(context.Background(), 1) }()
	<-clock.armed
	claimDone := make(chan error, 1)
	go func() { claimDone <- s.acquire(context.Background(), 0) }()
	<-clock.armed
	s.release(0) // a main slot frees: the claim goes first
	require.NoError(t, <-claimDone)
	s.release(1) // the read's slot frees: the waiting read gets it
	require.NoError(t, <-readDone)
	require.Equal(t, 2, main.used)
	require.Equal(t, 1, dflt.used)
}

// A class that is shed last keeps the long wait even while its queue stands (a shed heartbeat
// can cost a run its lease), and still serves the newest first.
func TestSlotQueueLastToShedKeepsTheLongWait(t *testing.T) {
	t.Parallel()
	s, clock := newTestQueue(1)
	s.classes[0].lastToShed = true
	require.NoError(t, s.acquire(context.Background(), 0))
	order := make(chan string, 2)
	_, oldest := queued(t, s, clock, context.Background(), "oldest", order)
	clock.advance(testInterval)
	d, newest := queued(t, s, clock, context.Background(), "newest", order)
	require.Equal(t, testLong, d)
	releaseServes(t, s, newest, order, "newest")
	s.release(0)
	require.NoError(t, <-oldest)
}

// releaseServes frees a slot and requires that it went to the waiter whose result is done and
// who reports name on order.
func releaseServes(t *testing.T, s *slotQueue, done <-chan error, order <-chan string, name string, msgAndArgs ...any) {
	t.Helper()
	s.release(0)
	require.NoError(t, <-done)
	require.Equal(t, name, <-order, msgAndArgs...)
}

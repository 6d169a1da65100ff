package client

import (
	"context"
	"sync"
	"time"
)

// LeaseMargin is how long before a lease's end on this worker's clock the worker must have
// stopped its work, for a lease of leaseSeconds: 1 s plus 1% of the lease.
//
// The lease's end is reckoned here from when the request that set it was sent (the claim,
// then each answered heartbeat), which is never later than when the service started it, so
// network delay only makes this end earlier than the service's. What the margin covers:
//   - clock rates: this machine's monotonic clock and the service's clock may run at slightly
//     different speeds (NTP keeps them within 500 ppm; 1% is 20 times that);
//   - clock offsets between the service's replicas, whose clocks set and check lease ends;
//   - the sweep: it may expire the lease at any instant after its end, and another worker may
//     claim the run right after, so the sweep's period buys no time at all;
//   - this process's own delays: a late timer, the time to deliver SIGKILL and see it land.
func LeaseMargin(leaseSeconds int) time.Duration {
	lease := time.Duration(leaseSeconds) * time.Second
	return time.Second + lease/100
}

// leaseClock is when a run's lease runs out at the latest, on this machine's clock: the
// lease's length after the last request that set it (the claim, then each heartbeat) was
// sent, since the service started it after it received that request. Times carry Go's
// monotonic reading, so a change of the wall clock does not move them.
type leaseClock struct {
	length time.Duration
	mu     sync.Mutex
	end    time.Time
}

func newLeaseClock(claimSent time.Time, leaseSeconds int) *leaseClock {
	length := time.Duration(leaseSeconds) * time.Second
	return &leaseClock{length: length, end: claimSent.Add(length)}
}

// renewed records a heartbeat sent at sent that the service answered.
func (l *leaseClock) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if end := sent.Add(l.length); end.After(l.end) {
		l.end = end
	}
}

func (l *leaseClock) until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// expire calls stop once the lease's end, less before, has come without a renewal past it;
// it returns then, or when ctx ends. The end only moves later, so a timer that fires early is
// impossible and one that fires after a renewal is set again for the new end.
func (l *leaseClock) expire(ctx context.Context, before time.Duration, stop func()) {
	for {
		d := time.Until(l.until().Add(-before))
		if d <= 0 {
			stop()
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

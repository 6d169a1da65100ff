package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/internal/ctxwait"
)

// AdmissionClass says how a request is admitted. Executor traffic goes ahead of reads and
// creations, and the requests that keep a lease alive are the last to be shed: a shed
// heartbeat can cost a run its lease, a shed read costs the client one retry.
type AdmissionClass int

const (
	// ClassExempt is never counted nor shed: probes, metrics, the spec and its docs page,
	// which an orchestrator or an operator needs most when the service is overloaded.
	ClassExempt AdmissionClass = iota
	// ClassStream is a long-lived stream (Server-Sent Events). It holds no database
	// connection while it waits for news, so it must not take an ordinary slot for its
	// whole life; it is not counted here.
	ClassStream
	// ClassHeartbeat keeps a lease: the lease slots, with a reserve that reports and releases
	// cannot take.
	ClassHeartbeat
	// ClassLease ends a lease: a report (PATCH of a run) or a release.
	ClassLease
	// ClassClaim hands out runs.
	ClassClaim
	// ClassDefault is everything else under /api/v1: reads, creations, pause and cancel.
	ClassDefault
)

// String names the class in metrics.
func (c AdmissionClass) String() string {
	switch c {
	case ClassExempt:
		return "exempt"
	case ClassStream:
		return "stream"
	case ClassHeartbeat:
		return "heartbeat"
	case ClassLease:
		return "lease"
	case ClassClaim:
		return "claim"
	default:
		return "default"
	}
}

// AdmissionObserver is told what admission does, for metrics.
type AdmissionObserver interface {
	// Admitted counts a request let through after waiting waited for its slot.
	Admitted(class string, waited time.Duration)
	// Shed counts a request answered 503 busy because no slot freed up in time; waited is
	// the time from the handler's read of the request to the answer.
	Shed(class string, waited time.Duration)
	// Waiting moves the number of requests waiting for a slot by delta.
	Waiting(class string, delta int)
	// InFlight moves the number of admitted requests still being served by delta.
	InFlight(class string, delta int)
}

// Admission bounds the requests being served at once and queues the rest (admission_queue.go):
// a burst waits its turn, a standing queue sheds quickly, newest first served while it stands.
type Admission struct {
	// MaxInFlight bounds claims and other requests together. It is meant to stay below the
	// main database pool, so that an admitted request never queues for a connection.
	MaxInFlight int
	// LeaseMaxInFlight bounds heartbeats, reports and releases: slots of their own that no
	// other request can take, meant to match the lease database pool (default
	// DefaultLeaseMaxInFlight). Reports and releases may take all but a reserve for
	// heartbeats (AdmissionLimits.Report).
	LeaseMaxInFlight int
	// Wait (ADMISSION_WAIT, default 100 ms) is both the interval after which a queue that has
	// not been empty counts as standing and the longest a request that arrives at a standing
	// queue waits before it is shed.
	Wait time.Duration
	// LongWait (ADMISSION_LONG_WAIT, default 1 s) is the longest a request that arrives at a
	// queue that is not standing (a burst) waits.
	LongWait time.Duration
	Observer AdmissionObserver
	// clock is the queue's time source; nil is the real clock.
	clock admissionClock
}

// DefaultLeaseMaxInFlight is the lease slots when Admission.LeaseMaxInFlight is zero.
const DefaultLeaseMaxInFlight = 4

// AdmissionLimits are the per-class bounds. Lease traffic has its own slots; claims may use
// all of MaxInFlight and other requests all but a reserve (an eighth, at least one), so that
// no amount of reads can take the slots claims need. Likewise heartbeats may use all of the
// lease slots and reports and releases all but a reserve (a quarter, at least one): a report
// waits for its backfill's (or pool's) row, up to LOCK_WAIT, while another transaction holds
// it, and reports of one held backfill would fill every lease slot, so that heartbeats of
// unrelated runs would be shed and a healthy run lose its lease. A heartbeat locks
// only its own run.
type AdmissionLimits struct {
	Lease, Report, Claim, Default int
	// MaxWaiting bounds each class's queue: past it a request is shed at once, since the
	// slots could not turn over fast enough to serve it within the long wait anyway.
	MaxWaiting int
}

// Limits derives the per-class bounds.
func (a Admission) Limits() AdmissionLimits {
	total := max(a.MaxInFlight, 2)
	lease := a.LeaseMaxInFlight
	if lease <= 0 {
		lease = DefaultLeaseMaxInFlight
	}
	return AdmissionLimits{
		Lease:      lease,
		Report:     max(1, lease-max(1, lease/4)),
		Claim:      total,
		Default:    total - max(1, total/8),
		MaxWaiting: 8 * (total + lease),
	}
}

// admitter admits requests through one slotQueue. Classes, in priority order: heartbeat (the
// lease pool), lease (the lease pool and the report pool, which keeps the heartbeats' reserve
// out of its reach), claim (the main pool), default (the main pool and the default pool,
// which keeps the claims' reserve out of its reach).
type admitter struct {
	obs     AdmissionObserver
	queue   *slotQueue
	classes classTable
}

// Queue indexes of the classes that are admitted.
const (
	queueHeartbeat = iota
	queueLease
	queueClaim
	queueDefault
)

func queueOf(c AdmissionClass) int {
	switch c {
	case ClassHeartbeat:
		return queueHeartbeat
	case ClassLease:
		return queueLease
	case ClassClaim:
		return queueClaim
	default:
		return queueDefault
	}
}

func newAdmitter(a Admission, classes classTable) *admitter {
	l := a.Limits()
	wait, long := a.Wait, a.LongWait
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	if long <= 0 {
		long = time.Second
	}
	long = max(long, wait)
	clock := a.clock
	if clock == nil {
		clock = realClock{}
	}
	var onWait func(c, delta int)
	if a.Observer != nil {
		names := [...]string{queueHeartbeat: ClassHeartbeat.String(), queueLease: ClassLease.String(),
			queueClaim: ClassClaim.String(), queueDefault: ClassDefault.String()}
		onWait = func(c, delta int) { a.Observer.Waiting(names[c], delta) }
	}
	leasePool := &slotPool{capacity: l.Lease}
	reportPool := &slotPool{capacity: l.Report}
	mainPool := &slotPool{capacity: l.Claim}
	defaultPool := &slotPool{capacity: l.Default}
	return &admitter{
		obs:     a.Observer,
		classes: classes,
		queue: &slotQueue{
			clock: clock, interval: wait, short: wait, long: long, onWait: onWait,
			classes: []*classQueue{
				queueHeartbeat: {pools: []*slotPool{leasePool}, maxWaiting: l.MaxWaiting, lastToShed: true},
				queueLease:     {pools: []*slotPool{leasePool, reportPool}, maxWaiting: l.MaxWaiting, lastToShed: true},
				queueClaim:     {pools: []*slotPool{mainPool}, maxWaiting: l.MaxWaiting},
				queueDefault:   {pools: []*slotPool{mainPool, defaultPool}, maxWaiting: l.MaxWaiting},
			},
		},
	}
}

// beforeAll admits the requests that carry no body (reads) before any other middleware runs:
// under overload most requests are shed, and a shed read then costs no request id, no access
// log line and no route metrics (backfill_admission_shed_total counts it), only its parse and
// a prepared answer.
func (a *admitter) beforeAll(next http.Handler) http.Handler {
	return a.admit(next, func(r *http.Request) bool { return !takesBody(r.Method) })
}

// afterBody admits the requests that carry a body once it has been read (limitBody), so that a
// slow uploader cannot pin a slot while its body trickles in.
func (a *admitter) afterBody(next http.Handler) http.Handler {
	return a.admit(next, func(r *http.Request) bool { return takesBody(r.Method) })
}

// admit admits a request that mine selects, or answers 503 busy with Retry-After once its
// wait is over; other requests pass through.
func (a *admitter) admit(next http.Handler, mine func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		class := a.classes.classify(r)
		if class == ClassExempt || class == ClassStream || !mine(r) {
			next.ServeHTTP(w, r)
			return
		}
		name, q := class.String(), queueOf(class)
		start := time.Now()
		err := a.queue.acquire(r.Context(), q)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client went away while waiting; nobody reads an answer
			}
			if a.obs != nil {
				a.obs.Shed(name, time.Since(start))
			}
			h := w.Header()
			h.Set("Content-Type", "application/problem+json")
			h.Set("Cache-Control", "no-store")
			h.Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(shedBody) // the client hung up; nothing to do
			return
		}
		if a.obs != nil {
			a.obs.Admitted(name, time.Since(start))
		}
		a.inFlight(name, 1)
		if class != ClassClaim && !mayWaitOutside(r) {
			defer a.leave(q, name)
			next.ServeHTTP(w, r)
			return
		}
		// A claim may wait for work (wait_seconds) and a read of events for an older
		// transaction: each gives its slot back meanwhile, through the hold in its context.
		hold := &admissionHold{a: a, q: q, name: name, held: true}
		defer hold.release()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admissionHoldKey{}, hold)))
	})
}

func (a *admitter) inFlight(name string, delta int) {
	if a.obs != nil {
		a.obs.InFlight(name, delta)
	}
}

// leave gives an admitted request's slot back.
func (a *admitter) leave(q int, name string) {
	a.queue.release(q)
	a.inFlight(name, -1)
}

// mayWaitOutside reports whether r is a read of events, which waits outside its slot for an
// older transaction (outsideAdmission). Requests that never wait are served without the
// hold in their context: a new context and a copy of the request would cost a status read
// two allocations it never uses.
func mayWaitOutside(r *http.Request) bool {
	return strings.HasSuffix(r.URL.Path, "/events")
}

// admissionHold is an admitted request's slot, which its handler may give back while it
// waits for something that needs no database (work to claim, an older transaction to end)
// and take again, through the queue like a new request, before it goes on. Only the
// request's own goroutine uses it.
type admissionHold struct {
	a    *admitter
	q    int
	name string
	held bool
}

type admissionHoldKey struct{}

// requestSlot is the request's admission slot; nil when admission is off or the request
// never waits outside it.
func requestSlot(ctx context.Context) *admissionHold {
	h, _ := ctx.Value(admissionHoldKey{}).(*admissionHold)
	return h
}

// release gives the slot back while the request waits.
func (h *admissionHold) release() {
	if !h.held {
		return
	}
	h.held = false
	h.a.leave(h.q, h.name)
}

// reacquire takes a slot again as a new request of its class would: an error means that it
// was shed (counted as such) or its client left, and the request holds no slot.
func (h *admissionHold) reacquire(ctx context.Context) error {
	if h.held {
		return nil
	}
	start := time.Now()
	if err := h.a.queue.acquire(ctx, h.q); err != nil {
		if h.a.obs != nil && ctx.Err() == nil {
			h.a.obs.Shed(h.name, time.Since(start))
		}
		return err
	}
	h.held = true
	h.a.inFlight(h.name, 1)
	return nil
}

// outsideAdmission gives the request's admission slot back, waits d (or until ctx ends) and
// takes a slot again, and reports whether it holds one: a request that waits for something
// other than the database (an older transaction to end) must not keep a slot that other
// requests need meanwhile. Without admission it only waits.
func outsideAdmission(ctx context.Context, d time.Duration) bool {
	hold := requestSlot(ctx)
	if hold != nil {
		hold.release()
	}
	if !ctxwait.Sleep(ctx, d) {
		return false
	}
	return hold == nil || hold.reacquire(ctx) == nil
}

// shedBody is the answer to every shed request, encoded once: shedding must stay cheap.
var shedBody = func() []byte {
	b, err := json.Marshal(problem(http.StatusServiceUnavailable, "busy", "the server is at capacity; retry shortly"))
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}()

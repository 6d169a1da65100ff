package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
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
	// ClassLease keeps or ends a lease: heartbeat, report (PATCH of a run), release.
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
	case ClassLease:
		return "lease"
	case ClassClaim:
		return "claim"
	default:
		return "default"
	}
}

// ClassifyRequest is the one place that decides a request's class, from its method and path
// alone: admission runs before routing and validation, so that shedding stays cheap.
func ClassifyRequest(r *http.Request) AdmissionClass {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/")
	if !ok {
		return ClassExempt
	}
	if IsEventStream(r) {
		return ClassStream
	}
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 2 && parts[0] == "runs" && parts[1] == "claim":
		return ClassClaim
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "runs" &&
		(parts[2] == "heartbeat" || parts[2] == "release"):
		return ClassLease
	case r.Method == http.MethodPatch && len(parts) == 4 && parts[0] == "dags" && parts[2] == "runs":
		return ClassLease // an executor's report
	}
	return ClassDefault
}

// AdmissionObserver is told what admission does, for metrics.
type AdmissionObserver interface {
	// Admitted counts a request let through after waiting waited for its slot.
	Admitted(class string, waited time.Duration)
	// Shed counts a request answered 503 busy because no slot freed up in time.
	Shed(class string)
	// Waiting moves the number of requests waiting for a slot by delta.
	Waiting(class string, delta int)
	// InFlight moves the number of admitted requests still being served by delta.
	InFlight(class string, delta int)
}

// Admission bounds the requests being served at once. MaxInFlight is the bound for all
// classes together and is meant to stay below the database pool, so that an admitted
// request never queues for a connection; Wait is the longest a request waits for a slot
// before it is answered 503 busy.
type Admission struct {
	MaxInFlight int
	Wait        time.Duration
	Observer    AdmissionObserver
}

// AdmissionLimits are the per-class bounds derived from MaxInFlight (at least 3). An eighth of
// the slots (at least one) is kept for lease traffic alone and another eighth for claims and
// lease traffic, so that no amount of reads can take the slots heartbeats need. An eighth is
// enough: a heartbeat or a report is one short statement, so two slots of a pool of 20 carry
// on the order of a thousand of them a second.
type AdmissionLimits struct {
	Lease, Claim, Default int
	// MaxWaiting bounds each class's queue: past it a request is shed at once, since the
	// slots could not turn over fast enough to serve it within Wait anyway.
	MaxWaiting int
}

// Limits derives the per-class bounds.
func (a Admission) Limits() AdmissionLimits {
	total := max(a.MaxInFlight, 3)
	reserve := max(1, total/8)
	return AdmissionLimits{
		Lease:      total,
		Claim:      total - reserve,
		Default:    total - 2*reserve,
		MaxWaiting: 8 * total,
	}
}

// admitter holds nested semaphores: a default request takes a slot in all three, a claim in
// the claim and lease ones, a lease request in the lease one only. Every request acquires
// them in the same order, so nested waits cannot deadlock.
type admitter struct {
	wait       time.Duration
	obs        AdmissionObserver
	maxWaiting int64
	dflt       *semaphore.Weighted
	claim      *semaphore.Weighted
	lease      *semaphore.Weighted
	waiting    [ClassDefault + 1]atomic.Int64
}

func newAdmitter(a Admission) *admitter {
	l := a.Limits()
	wait := a.Wait
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	return &admitter{
		wait:       wait,
		obs:        a.Observer,
		maxWaiting: int64(l.MaxWaiting),
		dflt:       semaphore.NewWeighted(int64(l.Default)),
		claim:      semaphore.NewWeighted(int64(l.Claim)),
		lease:      semaphore.NewWeighted(int64(l.Lease)),
	}
}

func (a *admitter) semaphores(c AdmissionClass) []*semaphore.Weighted {
	switch c {
	case ClassLease:
		return []*semaphore.Weighted{a.lease}
	case ClassClaim:
		return []*semaphore.Weighted{a.claim, a.lease}
	default:
		return []*semaphore.Weighted{a.dflt, a.claim, a.lease}
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

// admit admits a request that mine selects, or answers 503 busy with Retry-After within the
// wait; other requests pass through.
func (a *admitter) admit(next http.Handler, mine func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		class := ClassifyRequest(r)
		if class == ClassExempt || class == ClassStream || !mine(r) {
			next.ServeHTTP(w, r)
			return
		}
		name := class.String()
		start := time.Now()
		release, err := a.acquire(r.Context(), class, start)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client went away while waiting; nobody reads an answer
			}
			if a.obs != nil {
				a.obs.Shed(name)
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
			a.obs.InFlight(name, 1)
			defer a.obs.InFlight(name, -1)
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// shedBody is the answer to every shed request, encoded once: shedding must stay cheap.
var shedBody = func() []byte {
	b, err := json.Marshal(problem(http.StatusServiceUnavailable, "busy", "the server is at capacity; retry shortly"))
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}()

// errQueueFull is returned when a class already has MaxWaiting requests queued.
var errQueueFull = errors.New("admission queue full")

// acquire takes every semaphore of the class, waiting until start+wait at most.
func (a *admitter) acquire(ctx context.Context, class AdmissionClass, start time.Time) (func(), error) {
	sems := a.semaphores(class)
	for i, s := range sems {
		if s.TryAcquire(1) {
			continue
		}
		if err := a.await(ctx, class, start, sems, i); err != nil {
			return nil, err
		}
		break
	}
	return func() { releaseAll(sems) }, nil
}

// await is acquire's slow path, from the first semaphore that had no free slot: the timer and
// the waiting count are only paid for when a request has to wait. On failure it gives back
// what was taken.
func (a *admitter) await(ctx context.Context, class AdmissionClass, start time.Time, sems []*semaphore.Weighted, from int) error {
	if a.waiting[class].Add(1) > a.maxWaiting {
		a.waiting[class].Add(-1)
		releaseAll(sems[:from])
		return errQueueFull
	}
	if a.obs != nil {
		a.obs.Waiting(class.String(), 1)
	}
	defer func() {
		a.waiting[class].Add(-1)
		if a.obs != nil {
			a.obs.Waiting(class.String(), -1)
		}
	}()
	wctx, cancel := context.WithDeadline(ctx, start.Add(a.wait))
	defer cancel()
	for i := from; i < len(sems); i++ {
		if err := sems[i].Acquire(wctx, 1); err != nil {
			releaseAll(sems[:i])
			return err
		}
	}
	return nil
}

func releaseAll(sems []*semaphore.Weighted) {
	for i := len(sems) - 1; i >= 0; i-- {
		sems[i].Release(1)
	}
}

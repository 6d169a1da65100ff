package handlers_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// gateStore holds every call it serves until the gate of its kind (get, claim, heartbeat, release)
// opens, and tells which call entered. The methods the tests do not use panic through the nil
// embedded interface.
type gateStore struct {
	handlers.Store
	entered chan string
	gates   map[string]chan struct{}
}

func newGateStore() *gateStore {
	return &gateStore{entered: make(chan string, 256), gates: map[string]chan struct{}{
		"get": make(chan struct{}), "claim": make(chan struct{}), "heartbeat": make(chan struct{}),
		"release": make(chan struct{}),
	}}
}

func (g *gateStore) open(names ...string) {
	for _, n := range names {
		close(g.gates[n])
	}
}

func (g *gateStore) hold(ctx context.Context, name string) error {
	g.entered <- name
	select {
	case <-g.gates[name]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gateStore) BackfillGet(ctx context.Context, id int64) (repo.Backfill, error) {
	return repo.Backfill{ID: id, DagID: "d", State: "running"}, g.hold(ctx, "get")
}

func (g *gateStore) BackfillGetWithETA(ctx context.Context, id int64) (repo.Backfill, *float64, error) {
	return repo.Backfill{ID: id, DagID: "d", State: "running"}, nil, g.hold(ctx, "get")
}

func (g *gateStore) RunClaim(ctx context.Context, p repo.RunClaimParams) ([]repo.Run, bool, error) {
	return nil, false, g.hold(ctx, "claim")
}

func (g *gateStore) RunHeartbeat(ctx context.Context, runPK int64, workerID string) (repo.Heartbeat, error) {
	return repo.Heartbeat{LeaseExpiresAt: time.Now()}, g.hold(ctx, "heartbeat")
}

func (g *gateStore) RunRelease(ctx context.Context, runPK int64, workerID string) (repo.Run, error) {
	return repo.Run{ID: runPK, DagID: "d", RunID: "manual__2024-01-01T00:00:00Z", State: "queued"}, g.hold(ctx, "release")
}

// countingObserver counts what admission reports and signals every wait that starts.
type countingObserver struct {
	mu       sync.Mutex
	admitted map[string]int
	shed     map[string]int
	waits    chan string
}

func newCountingObserver() *countingObserver {
	return &countingObserver{admitted: map[string]int{}, shed: map[string]int{}, waits: make(chan string, 256)}
}

func (o *countingObserver) Admitted(class string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.admitted[class]++
}

func (o *countingObserver) Shed(class string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.shed[class]++
}

func (o *countingObserver) Waiting(class string, delta int) {
	if delta > 0 {
		o.waits <- class
	}
}

func (o *countingObserver) InFlight(string, int) {}

func (o *countingObserver) counts() (admitted, shed map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a, s := map[string]int{}, map[string]int{}
	for k, v := range o.admitted {
		a[k] = v
	}
	for k, v := range o.shed {
		s[k] = v
	}
	return a, s
}

var (
	getReq       = struct{ method, path, body string }{"GET", "/api/v1/backfills/1", ""}
	claimReq     = struct{ method, path, body string }{"POST", "/api/v1/runs/claim", `{"worker_id":"w"}`}
	heartbeatReq = struct{ method, path, body string }{"POST", "/api/v1/runs/7/heartbeat", `{"worker_id":"w"}`}
	releaseReq   = struct{ method, path, body string }{"POST", "/api/v1/runs/8/release", `{"worker_id":"w"}`}
)

// held starts a request that will wait in the store, and returns once it is inside it; the
// returned channel yields its answer when the gate opens.
func held(t *testing.T, h http.Handler, g *gateStore, r struct{ method, path, body string }, want string) <-chan *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serveOne(t, h, r.method, r.path, r.body) }()
	select {
	case got := <-g.entered:
		require.Equal(t, want, got)
	case rec := <-done:
		t.Fatalf("%s %s answered %d before reaching the store: %s", r.method, r.path, rec.Code, rec.Body.String())
	}
	return done
}

// heldN sends n requests r, each held as held holds one.
func heldN(t *testing.T, h http.Handler, g *gateStore, r struct{ method, path, body string }, want string, n int) []<-chan *httptest.ResponseRecorder {
	t.Helper()
	out := make([]<-chan *httptest.ResponseRecorder, 0, n)
	for range n {
		out = append(out, held(t, h, g, r, want))
	}
	return out
}

// shedWithin sends a request that must be shed: if it were admitted instead, the gate store
// would hold it until this generous bound and the answer would not be busy.
func shedWithin(t *testing.T, h http.Handler, r struct{ method, path, body string }, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req := httptest.NewRequestWithContext(ctx, r.method, r.path, body)
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	requireShed(t, rec, what)
}

// requireShed checks an answer is 503 busy with a positive Retry-After.
func requireShed(t *testing.T, rec *httptest.ResponseRecorder, what string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%s: %s", what, rec.Body.String())
	require.Equal(t, "busy", decodeProblem(t, rec).Code, what)
	ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "%s: Retry-After %q", what, rec.Header().Get("Retry-After"))
	require.Positive(t, ra, what)
}

func TestAdmissionLimitsKeepSlotsForExecutors(t *testing.T) {
	t.Parallel()
	require.Equal(t, handlers.AdmissionLimits{Lease: handlers.DefaultLeaseMaxInFlight, Report: 3, Claim: 4, Default: 3, MaxWaiting: 64},
		handlers.Admission{MaxInFlight: 4}.Limits())
	require.Equal(t, handlers.AdmissionLimits{Lease: 6, Report: 5, Claim: 18, Default: 16, MaxWaiting: 192},
		handlers.Admission{MaxInFlight: 18, LeaseMaxInFlight: 6}.Limits())
	// Below two slots claims could not keep a reserve of their own; two is the floor. One lease
	// slot keeps no reserve for heartbeats: reports need a slot too.
	require.Equal(t, handlers.AdmissionLimits{Lease: 1, Report: 1, Claim: 2, Default: 1, MaxWaiting: 24},
		handlers.Admission{MaxInFlight: 1, LeaseMaxInFlight: 1}.Limits())
}

func TestClassifyRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		method, path, accept string
		want                 handlers.AdmissionClass
	}{
		{"GET", "/healthz", "", handlers.ClassExempt},
		{"GET", "/readyz", "", handlers.ClassExempt},
		{"GET", "/metrics", "", handlers.ClassExempt},
		{"GET", "/openapi.yaml", "", handlers.ClassExempt},
		{"GET", "/docs", "", handlers.ClassExempt},
		{"POST", "/api/v1/runs/claim", "", handlers.ClassClaim},
		{"POST", "/api/v1/runs/12/heartbeat", "", handlers.ClassHeartbeat},
		{"POST", "/api/v1/runs/12/release", "", handlers.ClassLease},
		{"PATCH", "/api/v1/dags/d/runs/manual__2024-01-01T00:00:00Z", "", handlers.ClassLease},
		{"GET", "/api/v1/dags/d/runs/manual__2024-01-01T00:00:00Z", "", handlers.ClassDefault},
		{"PATCH", "/api/v1/backfills/3", "", handlers.ClassDefault},
		{"GET", "/api/v1/backfills/3", "", handlers.ClassDefault},
		{"POST", "/api/v1/backfills", "", handlers.ClassDefault},
		{"GET", "/api/v1/runs/claim", "", handlers.ClassDefault},
		{"GET", "/api/v1/backfills/3/events", "text/event-stream", handlers.ClassStream},
		{"GET", "/api/v1/backfills/3/events", "application/json", handlers.ClassDefault},
		{"GET", "/api/v1/backfills/3/dag_runs", "text/event-stream", handlers.ClassDefault},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.path, nil)
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		require.Equal(t, c.want, handlers.ClassifyRequest(r), "%s %s (%s)", c.method, c.path, c.accept)
	}
}

// With the read slots held, a further read is shed with 503 busy and Retry-After once its wait
// is over, while claims and heartbeats are still admitted; with every claim slot held too, a
// claim is shed and a heartbeat still goes through (its slots are its own); with the lease slot
// held, a heartbeat is shed. Probes and metrics are never shed. Once the held requests finish,
// every slot is back.
func TestAdmissionShedsReadsFirstAndNeverProbes(t *testing.T) {
	t.Parallel()
	g, obs := newGateStore(), newCountingObserver()
	const wait = 50 * time.Millisecond
	h, err := handlers.New(handlers.Options{
		Store:   g,
		Ready:   func(context.Context) error { return nil },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m 1\n")) }),
		Admission: &handlers.Admission{MaxInFlight: 4, LeaseMaxInFlight: 1, Wait: wait, LongWait: wait,
			Observer: obs},
	})
	require.NoError(t, err)
	// Limits: default 3, claim 4 (the default's and one more), lease 1 of its own.
	pending := heldN(t, h, g, getReq, "get", 3)
	start := time.Now()
	shedWithin(t, h, getReq, "a fourth read")
	// Not a timing assertion: a generous bound that an unbounded queue could never meet.
	require.Less(t, time.Since(start), wait+10*time.Second)

	pending = append(pending, held(t, h, g, claimReq, "claim"))
	shedWithin(t, h, claimReq, "a second claim")
	pending = append(pending, held(t, h, g, heartbeatReq, "heartbeat"))
	shedWithin(t, h, heartbeatReq, "a heartbeat past its slot")

	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		rec := serveOne(t, h, "GET", path, "")
		require.Equal(t, http.StatusOK, rec.Code, "%s while every slot is held: %s", path, rec.Body.String())
	}

	g.open("get", "claim", "heartbeat")
	for _, p := range pending {
		rec := <-p
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	admitted, shed := obs.counts()
	require.Equal(t, map[string]int{"default": 3, "claim": 1, "heartbeat": 1}, admitted)
	require.Equal(t, map[string]int{"default": 1, "claim": 1, "heartbeat": 1}, shed)

	// Every slot came back.
	for range 4 {
		rec := serveOne(t, h, claimReq.method, claimReq.path, claimReq.body)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	rec := serveOne(t, h, getReq.method, getReq.path, getReq.body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// A request that waits is admitted as soon as a slot frees up within the wait.
func TestAdmissionAdmitsAWaiterWhenASlotFrees(t *testing.T) {
	t.Parallel()
	g, obs := newGateStore(), newCountingObserver()
	h := admitting(t, g, handlers.Admission{MaxInFlight: 2, Wait: time.Minute, LongWait: time.Minute, Observer: obs})
	first := held(t, h, g, getReq, "get") // default has 1 slot at 2
	waiter := make(chan *httptest.ResponseRecorder, 1)
	go func() { waiter <- serveOne(t, h, getReq.method, getReq.path, getReq.body) }()
	require.Equal(t, "default", <-obs.waits)
	g.open("get")
	require.Equal(t, http.StatusOK, (<-first).Code)
	rec := <-waiter
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// A burst larger than the slots, arriving at once at an idle server, waits its turn: every
// request is answered by the store, none is shed, though each waits longer than Wait.
func TestAdmissionQueuesABurstInsteadOfSheddingIt(t *testing.T) {
	t.Parallel()
	g, obs := newGateStore(), newCountingObserver()
	// Wait is also the interval after which a queue counts as standing: the burst's six
	// requests must all arrive within it to count as one burst, which a loaded machine can
	// stretch past 20 ms (seen: one of them answered 503).
	const wait = 250 * time.Millisecond
	h := admitting(t, g, handlers.Admission{MaxInFlight: 2, Wait: wait, LongWait: time.Minute, Observer: obs})
	first := held(t, h, g, getReq, "get")
	const burst = 6
	var pending []<-chan *httptest.ResponseRecorder
	for range burst {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- serveOne(t, h, getReq.method, getReq.path, getReq.body) }()
		pending = append(pending, done)
	}
	for range burst {
		require.Equal(t, "default", <-obs.waits)
	}
	// Longer than the short wait: a shedding queue would have answered 503 by now.
	time.Sleep(3 * wait)
	g.open("get")
	require.Equal(t, http.StatusOK, (<-first).Code)
	for _, p := range pending {
		rec := <-p
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	_, shed := obs.counts()
	require.Empty(t, shed)
}

// Claims keep a reserve that reads cannot take, and lease requests have slots of their own:
// with every read slot held, a claim is admitted; with every claim slot held, heartbeats are.
func TestAdmissionKeepsReservesForExecutors(t *testing.T) {
	t.Parallel()
	g := newGateStore()
	h := admitting(t, g, handlers.Admission{MaxInFlight: 4, LeaseMaxInFlight: 2, Wait: 20 * time.Millisecond, LongWait: 20 * time.Millisecond})
	lim := handlers.Admission{MaxInFlight: 4, LeaseMaxInFlight: 2}.Limits()
	pending := heldN(t, h, g, getReq, "get", lim.Default)
	shedWithin(t, h, getReq, "a read with the read slots held")
	pending = append(pending, heldN(t, h, g, claimReq, "claim", lim.Claim-lim.Default)...)
	shedWithin(t, h, claimReq, "a claim with every main slot held")
	pending = append(pending, heldN(t, h, g, heartbeatReq, "heartbeat", lim.Lease)...)
	g.open("get", "claim", "heartbeat")
	requireAllOK(t, pending)
}

// Reports and releases leave heartbeats a reserve of the lease slots: a report waits for its
// backfill's row while another transaction holds it (up to LOCK_WAIT), and reports of one
// held backfill must not shed the heartbeats of every other run (an audit, 2026-12-06: a
// healthy run lost its lease).
func TestAdmissionKeepsAReserveForHeartbeats(t *testing.T) {
	t.Parallel()
	g := newGateStore()
	h := admitting(t, g, handlers.Admission{MaxInFlight: 4, LeaseMaxInFlight: 4, Wait: 20 * time.Millisecond, LongWait: 20 * time.Millisecond})
	lim := handlers.Admission{MaxInFlight: 4, LeaseMaxInFlight: 4}.Limits()
	require.Equal(t, 3, lim.Report)
	pending := heldN(t, h, g, releaseReq, "release", lim.Report)
	shedWithin(t, h, releaseReq, "a release with the report slots held")
	pending = append(pending, heldN(t, h, g, heartbeatReq, "heartbeat", lim.Lease-lim.Report)...)
	shedWithin(t, h, heartbeatReq, "a heartbeat with every lease slot held")
	g.open("release", "heartbeat")
	requireAllOK(t, pending)
}

// Once MaxWaiting requests of a class wait, the next one is shed at once instead of joining a
// queue that could not drain within the wait.
func TestAdmissionBoundsTheQueue(t *testing.T) {
	t.Parallel()
	g, obs := newGateStore(), newCountingObserver()
	h := admitting(t, g, handlers.Admission{MaxInFlight: 2, LeaseMaxInFlight: 1, Wait: time.Minute, LongWait: time.Minute, Observer: obs})
	lim := handlers.Admission{MaxInFlight: 2, LeaseMaxInFlight: 1}.Limits()
	first := held(t, h, g, getReq, "get")
	pending := []<-chan *httptest.ResponseRecorder{first}
	for range lim.MaxWaiting {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- serveOne(t, h, getReq.method, getReq.path, getReq.body) }()
		pending = append(pending, done)
	}
	for range lim.MaxWaiting {
		require.Equal(t, "default", <-obs.waits)
	}
	// With a one-minute wait, only the queue bound can answer this one.
	shedWithin(t, h, getReq, "a read past MaxWaiting")
	g.open("get")
	for _, p := range pending {
		rec := <-p
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	_, shed := obs.counts()
	require.Equal(t, map[string]int{"default": 1}, shed)
}

// admitting is the service's handler over g, with admission control a.
func admitting(t *testing.T, g handlers.Store, a handlers.Admission) http.Handler {
	t.Helper()
	h, err := handlers.New(handlers.Options{Store: g, Admission: &a})
	require.NoError(t, err)
	return h
}

// requireAllOK requires every pending request to answer 200.
func requireAllOK(t *testing.T, pending []<-chan *httptest.ResponseRecorder) {
	t.Helper()
	for _, p := range pending {
		require.Equal(t, http.StatusOK, (<-p).Code)
	}
}

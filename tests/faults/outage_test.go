//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
	"github.com/lib/pq"
)

// outageLedger is what the clients were told: every 2xx answer, to be found in the database
// afterwards.
type outageLedger struct {
	mu sync.Mutex
	// backfills: id -> expected slot count and DAG.
	backfills map[int64]createdBackfill
	// claimed: run id -> worker.
	claimed map[int64]string
	// reported: run id -> state answered 200.
	reported map[int64]string
	// manual: run id -> logical date.
	manual map[int64]time.Time
	// replays: creations answered 201 with Idempotent-Replayed after an earlier attempt of
	// the same request had failed.
	replays int
}

type createdBackfill struct {
	DagID string
	Slots int
}

// readyzLog records /readyz answers as transitions.
type readyzLog struct {
	mu          sync.Mutex
	last        int
	transitions []string
	during503   int
	samples     int
}

// TestPostgresOutage runs clients that create backfills, create manual runs, claim and report,
// and breaks the database under them in three ways, one per subtest:
//
//   - terminate: pg_terminate_backend on every session of the service's database, again
//     and again for about 2 s (what a failover or an operator does to connections);
//   - refuse: the same, with ALLOW_CONNECTIONS false on the database, so that no new session
//     can start either, for about 2 s, then allowed again;
//   - restart: the service reaches PostgreSQL through a TCP proxy that drops every connection
//     and refuses new ones for about 2 s, as a restarted server looks to its clients.
//
// The shared cluster is never stopped: other tests run against it. Each subtest checks that
// /readyz fails during the outage (where the outage reaches readiness) and recovers after it,
// that no answer is a 5xx other than 503, that every 2xx answer is in the database, and that
// the lifecycle invariants hold.
func TestPostgresOutage(t *testing.T) {
	for _, variant := range []string{"terminate", "refuse", "restart"} {
		t.Run(variant, func(t *testing.T) { runOutage(t, variant) })
	}
}

func runOutage(t *testing.T, variant string) {
	const (
		before  = time.Second
		outage  = 2 * time.Second
		after   = 2 * time.Second
		nDags   = 6
		workers = 3
	)
	tdb := newTestDB(t)
	app := "bf_outage_" + variant
	dsn := tdb.DSN
	var px *tcpProxy
	if variant == "restart" {
		px = startProxy(t, dsn)
		dsn = px.dsn(dsn)
	}
	srv := startProc(t, app, dsn, "SWEEP_INTERVAL=200ms")
	c := newClient(srv.URL, true)
	dags := make([]string, nDags)
	for i := range dags {
		dags[i] = fmt.Sprintf("outage_%d", i)
		c.must(t, http.MethodPut, "/api/v1/dags/"+dags[i], map[string]any{"schedule": "@daily", "max_active_runs": 4}, 201)
	}

	ledger := &outageLedger{backfills: map[int64]createdBackfill{}, claimed: map[int64]string{},
		reported: map[int64]string{}, manual: map[int64]time.Time{}}
	var (
		fails   failures
		tally   statusTally
		codes   sync.Map // problem code of 503s -> *atomic.Int64
		stop    atomic.Bool
		load    sync.WaitGroup
		ready   = &readyzLog{last: 200}
		inOut   atomic.Bool
		seed    = uint64(time.Now().UnixNano())
		dayBase = time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	t.Logf("seed %d", seed)
	count503 := func(a *answer) {
		code := a.Problem().Code
		v, _ := codes.LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	// send sends one request and classifies its answer; it returns nil unless the answer is
	// a definitive one (not 503). 5xx other than 503 and transport errors are failures.
	send := func(op, method, path string, body any, headers ...string) *answer {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := c.do(ctx, method, path, body, headers...)
		if err != nil {
			fails.Add("%s: transport error: %v", op, err)
			return nil
		}
		tally.add(a.Status)
		switch {
		case a.Status == http.StatusServiceUnavailable:
			count503(a)
			if a.Problem().Code == "" {
				fails.Add("%s: 503 without a problem body: %s", op, a)
			}
			return nil
		case a.Status >= 500:
			fails.Add("%s answered %s", op, a)
			return nil
		}
		return a
	}
	// retry sends until a definitive answer, as a careful client does (same Idempotency-Key).
	retry := func(op, method, path string, body any, headers ...string) (*answer, int) {
		for attempt := 1; ; attempt++ {
			if a := send(op, method, path, body, headers...); a != nil || attempt == 50 || stop.Load() && attempt > 10 {
				return a, attempt
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	goLoad := loadkit.Looper(&load, &stop, seed)

	// Creators: small backfills, each with an Idempotency-Key, retried through 503s.
	var keyN atomic.Int64
	for i := range 2 {
		goLoad(uint64(10+i), func(rng *rand.Rand) {
			dag := dags[rng.IntN(nDags)]
			from := dayBase.AddDate(0, 0, rng.IntN(3000))
			days := 1 + rng.IntN(6)
			body := map[string]any{"dag_id": dag, "from_date": ts(from), "to_date": ts(from.AddDate(0, 0, days-1)),
				"max_active_runs": 1 + rng.IntN(3)}
			key := fmt.Sprintf("%s-%d", variant, keyN.Add(1))
			a, attempts := retry("create backfill", http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", key)
			if a == nil {
				return
			}
			switch a.Status {
			case http.StatusCreated:
				b, ok := loadkit.Decode[api.Backfill](&fails, "backfill", a.Body)
				if !ok {
					return
				}
				ledger.mu.Lock()
				ledger.backfills[b.Id] = createdBackfill{DagID: dag, Slots: days}
				if a.Header.Get("Idempotent-Replayed") == "true" && attempts > 1 {
					ledger.replays++
				}
				ledger.mu.Unlock()
			case http.StatusConflict:
				time.Sleep(20 * time.Millisecond)
			default:
				fails.Add("create backfill answered %s", a)
			}
		})
	}
	// Manual runs on unique dates, retried through 503s (409 run_already_exists means an
	// earlier attempt committed).
	var manualN atomic.Int64
	goLoad(20, func(rng *rand.Rand) {
		logical := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(manualN.Add(1)) * time.Minute)
		dag := dags[rng.IntN(nDags)]
		a, _ := retry("create run", http.MethodPost, "/api/v1/dags/"+dag+"/runs", map[string]any{"logical_date": ts(logical)})
		if a == nil {
			return
		}
		switch a.Status {
		case http.StatusCreated:
			r, ok := loadkit.Decode[api.DagRun](&fails, "run", a.Body)
			if !ok {
				return
			}
			ledger.mu.Lock()
			ledger.manual[r.Id] = logical
			ledger.mu.Unlock()
		case http.StatusConflict:
		default:
			fails.Add("create run answered %s", a)
		}
		time.Sleep(20 * time.Millisecond)
	})
	// Workers: claim, then report every claimed run, retrying the report through 503s.
	for i := range workers {
		worker := fmt.Sprintf("%s-w%d", variant, i)
		goLoad(uint64(30+i), func(rng *rand.Rand) {
			a := send("claim", http.MethodPost, "/api/v1/runs/claim",
				map[string]any{"worker_id": worker, "limit": 1 + rng.IntN(3), "lease_seconds": 300})
			if a == nil {
				time.Sleep(50 * time.Millisecond)
				return
			}
			if a.Status != http.StatusOK {
				fails.Add("claim answered %s", a)
				return
			}
			cr, ok := loadkit.Decode[api.ClaimResponse](&fails, "claim", a.Body)
			if !ok {
				return
			}
			if len(cr.Runs) == 0 {
				time.Sleep(30 * time.Millisecond)
			}
			ledger.mu.Lock()
			for _, r := range cr.Runs {
				ledger.claimed[r.Id] = worker
			}
			ledger.mu.Unlock()
			for _, r := range cr.Runs {
				state := "success"
				if rng.IntN(5) == 0 {
					state = "failed"
				}
				ra, _ := retry("report", http.MethodPatch, "/api/v1/dags/"+r.DagId+"/runs/"+url.PathEscape(r.RunId),
					map[string]any{"state": state, "worker_id": worker})
				if ra == nil {
					continue
				}
				switch ra.Status {
				case http.StatusOK:
					ledger.mu.Lock()
					ledger.reported[r.Id] = state
					ledger.mu.Unlock()
				case http.StatusConflict:
					// lease_lost: an earlier attempt of this report committed before its 503.
				default:
					fails.Add("report answered %s", ra)
				}
			}
		})
	}
	// The /readyz poller.
	start := time.Now()
	load.Add(1)
	go func() {
		defer load.Done()
		for !stop.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			a, err := c.do(ctx, http.MethodGet, "/readyz", nil)
			cancel()
			if err != nil {
				fails.Add("readyz: %v", err)
				continue
			}
			ready.mu.Lock()
			ready.samples++
			if a.Status != ready.last {
				ready.transitions = append(ready.transitions, fmt.Sprintf("%d at +%s", a.Status, time.Since(start).Round(10*time.Millisecond)))
				ready.last = a.Status
			}
			if inOut.Load() && a.Status == http.StatusServiceUnavailable {
				ready.during503++
			}
			ready.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// The outage.
	time.Sleep(before)
	outStart := time.Since(start)
	inOut.Store(true)
	terminated := 0
	ctx := context.Background()
	switch variant {
	case "refuse":
		if err := setAllowConnections(ctx, t, tdb.Name, false); err != nil {
			t.Fatalf("ALLOW_CONNECTIONS false: %v", err)
		}
		t.Cleanup(func() { _ = setAllowConnections(context.Background(), t, tdb.Name, true) })
	case "restart":
		px.down()
	}
	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		if variant != "restart" {
			n, err := terminateBackends(ctx, t, tdb.Name)
			if err != nil {
				t.Fatalf("terminate: %v", err)
			}
			terminated += n
		}
		time.Sleep(20 * time.Millisecond)
	}
	switch variant {
	case "refuse":
		if err := setAllowConnections(ctx, t, tdb.Name, true); err != nil {
			t.Fatalf("ALLOW_CONNECTIONS true: %v", err)
		}
	case "restart":
		px.up(t)
	}
	inOut.Store(false)
	outEnd := time.Since(start)

	// Recovery: /readyz answers 200 again within a deadline.
	recoverDeadline := time.Now().Add(10 * time.Second)
	var recovered time.Duration
	for {
		a, err := c.do(context.Background(), http.MethodGet, "/readyz", nil)
		if err == nil && a.Status == http.StatusOK {
			recovered = time.Since(start) - outEnd
			break
		}
		if time.Now().After(recoverDeadline) {
			t.Fatalf("/readyz did not recover within 10 s after the outage: %v %v", a, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(after)
	stop.Store(true)
	load.Wait()
	fails.check(t)

	// After the outage every route works at once.
	c.must(t, http.MethodPut, "/api/v1/dags/after_outage", map[string]any{"schedule": "@daily"}, 201)
	b := decode[api.Backfill](t, c.must(t, http.MethodPost, "/api/v1/backfills",
		map[string]any{"dag_id": "after_outage", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"}, 201))
	ledger.backfills[b.Id] = createdBackfill{DagID: "after_outage", Slots: 3}

	// Every 2xx answer is in the database.
	checkLedger(t, tdb, ledger)
	violations, _, err := checkInvariants(tdb.DB)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Error(v)
	}

	var n503 []string
	codes.Range(func(k, v any) bool {
		n503 = append(n503, fmt.Sprintf("%d %s", v.(*atomic.Int64).Load(), k))
		return true
	})
	ready.mu.Lock()
	defer ready.mu.Unlock()
	switch variant {
	case "refuse", "restart":
		if ready.during503 == 0 {
			t.Errorf("/readyz never answered 503 during the outage (transitions: %v)", ready.transitions)
		}
	}
	if ready.last != http.StatusOK && len(ready.transitions) > 0 && !strings.HasPrefix(ready.transitions[len(ready.transitions)-1], "200") {
		t.Errorf("/readyz did not end at 200: %v", ready.transitions)
	}
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	t.Logf("%s: outage from +%s to +%s (%s); backends terminated %d; /readyz back to 200 %s after the outage",
		variant, outStart.Round(10*time.Millisecond), outEnd.Round(10*time.Millisecond), (outEnd - outStart).Round(10*time.Millisecond),
		terminated, recovered.Round(10*time.Millisecond))
	t.Logf("%s: %d requests: %s; 503 by code: %s", variant, tally.total(), tally.String(), strings.Join(n503, ", "))
	t.Logf("%s: /readyz %d samples, %d answered 503 during the outage, transitions %v", variant, ready.samples, ready.during503, ready.transitions)
	t.Logf("%s: in the database as answered: %d backfills created (%d replayed by Idempotency-Key after a failed attempt), %d manual runs, %d runs claimed, %d reports; lifecycle invariants checked",
		variant, len(ledger.backfills), ledger.replays, len(ledger.manual), len(ledger.claimed), len(ledger.reported))
	if errs := srv.LogsWithLevel("ERROR"); len(errs) > 0 {
		internal := 0
		for _, l := range errs {
			if strings.Contains(l, `"internal error"`) {
				internal++
				if internal <= 5 {
					t.Errorf("the server logged an internal error (a 500): %s", l)
				}
			}
		}
		t.Logf("%s: the server logged %d errors (%d internal)", variant, len(errs), internal)
	}
}

// checkLedger requires every 2xx answer of the ledger to be in the database.
func checkLedger(t *testing.T, tdb *testDB, l *outageLedger) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, want := range l.backfills {
		var got struct {
			DagID string `db:"dag_id"`
			Slots int    `db:"slots"`
			Total int    `db:"total"`
		}
		err := tdb.DB.Get(&got, `SELECT b.dag_id,
			(SELECT count(*) FROM backfill_dag_runs s WHERE s.backfill_id = b.id) AS slots,
			num_queued + num_running + num_success + num_failed + num_canceled + num_skipped AS total
			FROM backfills b WHERE b.id = $1`, id)
		if err != nil {
			t.Errorf("backfill %d answered 201 but is not in the database: %v", id, err)
			continue
		}
		if got.DagID != want.DagID || got.Slots != want.Slots || got.Total != want.Slots {
			t.Errorf("backfill %d: database has dag %s with %d slots (progress total %d), answered dag %s with %d slots",
				id, got.DagID, got.Slots, got.Total, want.DagID, want.Slots)
		}
	}
	for id, logical := range l.manual {
		var got time.Time
		if err := tdb.DB.Get(&got, `SELECT logical_date FROM dag_runs WHERE id = $1 AND run_type = 'manual'`, id); err != nil {
			t.Errorf("manual run %d answered 201 but is not in the database: %v", id, err)
		} else if !got.Equal(logical) {
			t.Errorf("manual run %d: logical_date %s, answered %s", id, got, logical)
		}
	}
	ids := make([]int64, 0, len(l.claimed))
	for id := range l.claimed {
		ids = append(ids, id)
	}
	rows := []struct {
		ID       int64   `db:"id"`
		State    string  `db:"state"`
		WorkerID *string `db:"worker_id"`
	}{}
	if err := tdb.DB.Select(&rows, `SELECT id, state, worker_id FROM dag_runs WHERE id = ANY($1)`, pq.Array(ids)); err != nil {
		t.Fatal(err)
	}
	found := map[int64]bool{}
	for _, r := range rows {
		found[r.ID] = true
		worker := l.claimed[r.ID]
		if r.WorkerID == nil || *r.WorkerID != worker {
			t.Errorf("run %d was claimed by %s (200) but the database names worker %v", r.ID, worker, r.WorkerID)
		}
		if want, ok := l.reported[r.ID]; ok && r.State != want {
			t.Errorf("run %d was reported %s (200) but is %s", r.ID, want, r.State)
		}
		if r.State == "queued" {
			t.Errorf("run %d was claimed (200) but is queued", r.ID)
		}
	}
	for _, id := range ids {
		if !found[id] {
			t.Errorf("run %d was claimed (200) but is not in the database", id)
		}
	}
}

// tcpProxy forwards TCP connections to PostgreSQL; down drops every connection and refuses
// new ones (the listener is closed), up listens again on the same port.
type tcpProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, dsn string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if !strings.Contains(target, ":") {
		target += ":5432"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) dsn(dsn string) string {
	u, _ := url.Parse(dsn)
	u.Host = p.addr
	return u.String()
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				defer p.wg.Done()
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
				p.mu.Lock()
				delete(p.conns, dst)
				delete(p.conns, src)
				p.mu.Unlock()
			}
			p.wg.Add(2)
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
}

// down closes the listener and every proxied connection.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// up listens on the same address again.
func (p *tcpProxy) up(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

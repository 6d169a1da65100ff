//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
)

// commitLostDetail is how the service says that a write's connection was lost after it was
// sent (503 `outcome_unknown`): the only 503 a one-second failover may cause.
const commitLostDetail = "may or may not have been applied"

// TestPostgresFailover runs the service against a primary with a synchronous standby
// (remote_apply), under steady creations and reads, then kills the primary with SIGKILL and
// promotes the standby a second later. It runs twice: on a multi-host DSN (libpq's
// host:port URL form with target_session_attrs=read-write), and on a single-host DSN
// through a TCP proxy that closes its connections in order and moves to the new primary
// once it is promoted (a VIP, or HAProxy with a health check).
//
// It requires: no 500; no 503 except writes whose connection was lost during COMMIT (at most
// a handful); no failure among requests sent 0.5 s or more after the promotion; the first 201
// and /readyz 200 within 1 s of the promotion; every acknowledged backfill and DAG on the new
// primary; the lifecycle invariants clean there; at least 10 pooled sessions on the primary
// when it dies (they go stale), and requests in flight across the failover answered 201.
func TestPostgresFailover(t *testing.T) {
	for _, via := range []string{"multihost", "proxy"} {
		t.Run(via, func(t *testing.T) { runFailover(t, via) })
	}
}

// reqRecord is one request of the load and its answer.
type reqRecord struct {
	op         string
	start, end time.Time
	status     int
	code       string
	detail     string
	err        error
}

type recorder struct {
	mu   sync.Mutex
	recs []reqRecord
}

func (r *recorder) add(rec reqRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

func (r *recorder) all() []reqRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]reqRecord(nil), r.recs...)
}

// failoverLedger is what the clients were told was written.
type failoverLedger struct {
	mu        sync.Mutex
	dags      map[string]bool
	backfills map[int64]createdBackfill
	ids       []int64
	// commitLostThenCreated and commitLostThenReplayed: what the same Idempotency-Key
	// answered after a 503 whose COMMIT outcome was unknown.
	commitLostThenCreated, commitLostThenReplayed int
}

func runFailover(t *testing.T, via string) {
	const (
		creators  = 3
		readers   = 2
		minStale  = 10
		afterProm = 3 * time.Second
	)
	pair := newPGPair(t, via)
	dsn := pair.multiHostDSN()
	var px *failoverProxy
	if via == "proxy" {
		px = startFailoverProxy(t, pair.primary.addr())
		dsn = fmt.Sprintf("postgres://postgres@%s/backfill?sslmode=disable", px.addr)
	}
	app := "bf_failover_" + via
	// The admission wait is 1 s, not the default 100 ms: this test judges the failover, and
	// its service is built with -race (several times slower) on 2 cores shared with two
	// PostgreSQL clusters whose commits wait for the standby. With 100 ms, ordinary load was
	// shed before the kill (CI on 2026-12-02: two reads sent 0.23 s before it answered 503
	// busy). Shedding itself is tested in the handlers' and cmd/bench's overload checks.
	srv := startProc(t, app, dsn, "DB_MAX_CONNS=14", "SWEEP_INTERVAL=1s", "ADMISSION_WAIT=1s")
	c := newClient(srv.URL, true)

	var (
		rec    recorder
		stop   atomic.Bool
		load   sync.WaitGroup
		fails  failures
		ledger = &failoverLedger{dags: map[string]bool{}, backfills: map[int64]createdBackfill{}}
		seed   = uint64(time.Now().UnixNano())
	)
	send := func(op, method, path string, body any, headers ...string) *answer {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := c.do(ctx, method, path, body, headers...)
		r := reqRecord{op: op, start: start, end: time.Now(), err: err}
		if a != nil {
			r.status = a.Status
			p := a.Problem()
			r.code, r.detail = p.Code, p.Detail
		}
		rec.add(r)
		return a
	}
	// untilAnswered repeats a request through 503s, as a careful client does (the same
	// Idempotency-Key), and says whether one of them was a lost COMMIT.
	untilAnswered := func(op, method, path string, body any, headers ...string) (*answer, bool) {
		lost := false
		for attempt := 1; attempt <= 100; attempt++ {
			a := send(op, method, path, body, headers...)
			if a != nil && a.Status != http.StatusServiceUnavailable {
				return a, lost
			}
			if a != nil && strings.Contains(a.Problem().Detail, commitLostDetail) {
				lost = true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil, lost
	}

	for i := range creators {
		load.Add(1)
		go func() {
			defer load.Done()
			for n := 0; !stop.Load(); n++ {
				dag := fmt.Sprintf("fo_%d_%d", i, n)
				a, _ := untilAnswered("put dag", http.MethodPut, "/api/v1/dags/"+dag, map[string]any{"schedule": "@daily"})
				if a == nil || (a.Status != http.StatusCreated && a.Status != http.StatusOK) {
					fails.Add("put dag %s: %v", dag, a)
					continue
				}
				ledger.mu.Lock()
				ledger.dags[dag] = true
				ledger.mu.Unlock()
				key := fmt.Sprintf("%s-%d-%d", via, i, n)
				body := map[string]any{"dag_id": dag, "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"}
				a, lost := untilAnswered("create backfill", http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", key)
				if a == nil || a.Status != http.StatusCreated {
					fails.Add("create backfill on %s: %v", dag, a)
					continue
				}
				b, ok := loadkit.Decode[api.Backfill](&fails, "backfill", a.Body)
				if !ok {
					continue
				}
				ledger.mu.Lock()
				ledger.backfills[b.Id] = createdBackfill{DagID: dag, Slots: 3}
				ledger.ids = append(ledger.ids, b.Id)
				if lost && a.Header.Get("Idempotent-Replayed") == "true" {
					ledger.commitLostThenReplayed++
				} else if lost {
					ledger.commitLostThenCreated++
				}
				ledger.mu.Unlock()
				time.Sleep(60 * time.Millisecond)
			}
		}()
	}
	for i := range readers {
		load.Add(1)
		go func() {
			defer load.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for !stop.Load() {
				ledger.mu.Lock()
				var id int64
				if len(ledger.ids) > 0 {
					id = ledger.ids[rng.IntN(len(ledger.ids))]
				}
				ledger.mu.Unlock()
				if id == 0 {
					send("list dags", http.MethodGet, "/api/v1/dags?limit=5", nil)
				} else {
					send("get backfill", http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d", id), nil)
				}
				time.Sleep(25 * time.Millisecond)
			}
		}()
	}
	load.Add(1)
	go func() {
		defer load.Done()
		for !stop.Load() {
			send("readyz", http.MethodGet, "/readyz", nil)
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// Steady state, then at least minStale pooled sessions on the primary: bursts of
	// concurrent reads open them, and the pool keeps them idle.
	time.Sleep(1500 * time.Millisecond)
	primaryDB := pair.primary.open("postgres")
	stale := 0
	for burst := 0; burst < 30; burst++ {
		if err := primaryDB.Get(&stale, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
			t.Fatal(err)
		}
		if stale >= minStale {
			break
		}
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send("list backfills", http.MethodGet, "/api/v1/backfills?limit=100", nil)
			}()
		}
		wg.Wait()
	}
	if stale < minStale {
		t.Fatalf("only %d pooled sessions on the primary before the kill; want %d", stale, minStale)
	}
	_ = primaryDB.Close()

	tKill := time.Now()
	pair.primary.kill()
	time.Sleep(time.Second)
	tPromStart := time.Now()
	pair.promote()
	tProm := time.Now()
	if px != nil {
		px.switchTo(pair.standby.addr())
	}
	time.Sleep(afterProm)
	stop.Store(true)
	load.Wait()
	fails.check(t)

	// What the clients saw.
	var (
		tally                                   statusTally
		n5xx, n503, commitLost, transport, late int
		ridden, riddenReads                     int
		firstCreated, firstReady                = time.Duration(-1), time.Duration(-1)
	)
	for _, r := range rec.all() {
		if r.err != nil {
			transport++
			t.Errorf("%s at +%s: transport error %v", r.op, r.start.Sub(tKill).Round(time.Millisecond), r.err)
			continue
		}
		tally.add(r.status)
		isReadyz := r.op == "readyz"
		switch {
		case r.status == http.StatusServiceUnavailable && isReadyz:
		case r.status == http.StatusServiceUnavailable && strings.Contains(r.detail, commitLostDetail):
			commitLost++
		case r.status == http.StatusServiceUnavailable:
			n503++
			if n503 <= 5 {
				t.Errorf("%s sent at %+.3fs after the kill answered 503 %s: %s", r.op, r.start.Sub(tKill).Seconds(), r.code, r.detail)
			}
		case r.status >= 500:
			n5xx++
			t.Errorf("%s answered %d %s", r.op, r.status, r.detail)
		}
		if !isReadyz && !r.start.Before(tProm.Add(500*time.Millisecond)) && r.status >= 500 {
			late++
		}
		if isReadyz && !r.start.Before(tProm.Add(time.Second)) && r.status != http.StatusOK {
			late++
		}
		if r.start.Before(tPromStart) && r.end.After(tPromStart) {
			switch {
			case r.status == http.StatusCreated:
				ridden++
			case r.status == http.StatusOK && !isReadyz:
				riddenReads++
			}
		}
		if r.status == http.StatusCreated && r.end.After(tProm) && (firstCreated < 0 || r.end.Sub(tProm) < firstCreated) {
			firstCreated = r.end.Sub(tProm)
		}
		if isReadyz && r.status == http.StatusOK && r.end.After(tProm) && (firstReady < 0 || r.end.Sub(tProm) < firstReady) {
			firstReady = r.end.Sub(tProm)
		}
	}

	// What the new primary holds: every acknowledged write.
	newDB := pair.standby.open("backfill")
	lostBackfills := 0
	ledger.mu.Lock()
	for id, want := range ledger.backfills {
		var got struct {
			DagID string `db:"dag_id"`
			Slots int    `db:"slots"`
		}
		err := newDB.Get(&got, `SELECT b.dag_id, (SELECT count(*) FROM backfill_dag_runs s WHERE s.backfill_id = b.id) AS slots
			FROM backfills b WHERE b.id = $1`, id)
		if err != nil || got.DagID != want.DagID || got.Slots != want.Slots {
			lostBackfills++
			t.Errorf("backfill %d (DAG %s) was answered 201 but the new primary has %+v (%v)", id, want.DagID, got, err)
		}
	}
	lostDags := 0
	for dag := range ledger.dags {
		var n int
		if err := newDB.Get(&n, `SELECT count(*) FROM dags WHERE dag_id = $1`, dag); err != nil || n != 1 {
			lostDags++
			t.Errorf("DAG %s was answered 2xx but is not on the new primary (%v)", dag, err)
		}
	}
	ledger.mu.Unlock()
	violations, _, err := checkInvariants(newDB)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
	internal, shown := 0, 0
	for _, l := range srv.LogsWithLevel("ERROR") {
		if strings.Contains(l, `"database unavailable"`) && shown < 4 {
			shown++
			t.Logf("server error: %s", l)
		}
		if strings.Contains(l, `"internal error"`) {
			internal++
			if internal <= 5 {
				t.Errorf("the server logged an internal error (a 500): %s", l)
			}
		}
	}

	t.Logf("%s: %d pooled sessions on the primary when it was killed; promotion (pg_ctl promote -w) took %s",
		via, stale, tProm.Sub(tPromStart).Round(time.Millisecond))
	t.Logf("%s: %d requests: %s", via, tally.total(), tally.String())
	t.Logf("%s: 500s %d; API 503s %d, of which COMMIT lost %d (then %d created and %d replayed by the same Idempotency-Key); other 503s %d; transport errors %d",
		via, n5xx, n503+commitLost, commitLost, ledger.commitLostThenCreated, ledger.commitLostThenReplayed, n503, transport)
	t.Logf("%s: ridden inside the server (sent before the promotion, answered after it): %d writes answered 201, %d reads answered 200",
		via, ridden, riddenReads)
	t.Logf("%s: acknowledged-but-lost: %d of %d backfills, %d of %d DAGs; failures among requests sent ≥0.5 s after the promotion: %d",
		via, lostBackfills, len(ledger.backfills), lostDags, len(ledger.dags), late)
	t.Logf("%s: first 201 %s after the promotion, first /readyz 200 %s after it (the primary was killed %s before the promotion)",
		via, firstCreated.Round(time.Millisecond), firstReady.Round(time.Millisecond), tPromStart.Sub(tKill).Round(time.Millisecond))

	if commitLost > 8 {
		t.Errorf("%d writes lost their connection during COMMIT; want a handful (≤ 8)", commitLost)
	}
	if late > 0 {
		t.Errorf("%d requests sent 0.5 s or more after the promotion failed", late)
	}
	if firstCreated < 0 || firstCreated > time.Second {
		t.Errorf("first 201 %s after the promotion; want ≤ 1 s", firstCreated)
	}
	if firstReady < 0 || firstReady > time.Second {
		t.Errorf("first /readyz 200 %s after the promotion; want ≤ 1 s", firstReady)
	}
	if ridden == 0 {
		t.Errorf("no request in flight across the failover was answered 201: the in-server retry was not exercised")
	}
}

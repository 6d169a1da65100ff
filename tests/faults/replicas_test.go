//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
)

// TestTwoReplicasUnderLoad runs two service processes on one database, both sweeping every
// 100 ms, under ~8 s of creates, claims, heartbeats, reports, pauses, unpauses and cancels sent
// to both. The lifecycle invariants are checked in one snapshot every 500 ms and at the end;
// each process's pools stay within DB_MAX_CONNS + DB_LEASE_MAX_CONNS (the lease pool is its own,
// beside the main one); once every run is finished, every backfill
// is terminal within two sweep intervals.
func TestTwoReplicasUnderLoad(t *testing.T) {
	const (
		loadFor    = 8 * time.Second
		interval   = 100 * time.Millisecond
		maxConns   = 6
		leaseConns = 2
		nDags      = 6
	)
	tdb := newTestDB(t)
	env := []string{"SWEEP_INTERVAL=" + interval.String(), fmt.Sprintf("DB_MAX_CONNS=%d", maxConns),
		fmt.Sprintf("DB_LEASE_MAX_CONNS=%d", leaseConns)}
	procs := []*proc{startProc(t, "bf_replica_a", tdb.DSN, env...), startProc(t, "bf_replica_b", tdb.DSN, env...)}
	clients := []*client{newClient(procs[0].URL, true), newClient(procs[1].URL, true)}
	pick := func(rng *rand.Rand) *client { return clients[rng.IntN(2)] }

	dags := make([]string, nDags)
	for i := range dags {
		dags[i] = fmt.Sprintf("replica_%d", i)
		clients[i%2].must(t, http.MethodPut, "/api/v1/dags/"+dags[i], map[string]any{"schedule": "@daily", "max_active_runs": 2}, 201)
	}

	var (
		fails     failures
		tally     statusTally
		stop      atomic.Bool
		load      sync.WaitGroup
		seed      = uint64(time.Now().UnixNano())
		created   atomic.Int64
		claimed   atomic.Int64
		reported  atomic.Int64
		actions   atomic.Int64
		abandoned struct {
			sync.Mutex
			runs []api.DagRun
		}
		known struct {
			sync.Mutex
			ids []int64
		}
	)
	t.Logf("seed %d", seed)
	expect := func(op string, a *answer, err error, allowed map[int]string) int {
		if err != nil {
			fails.Add("%s: %v", op, err)
			return 0
		}
		tally.add(a.Status)
		if a.Status == http.StatusServiceUnavailable && a.Problem().Code == "busy" && a.Header.Get("Retry-After") != "" {
			return a.Status // allowed by the contract under contention; counted
		}
		code, ok := allowed[a.Status]
		if !ok || (code != "" && a.Problem().Code != code) {
			fails.Add("%s answered %s", op, a)
			return 0
		}
		return a.Status
	}
	goLoad := loadkit.Looper(&load, &stop, seed)
	ctx := context.Background()
	base := time.Date(2018, 1, 1, 0, 0, 0, 0, time.UTC)

	for i := range 2 {
		goLoad(uint64(100+i), func(rng *rand.Rand) {
			from := base.AddDate(0, 0, rng.IntN(2000))
			body := map[string]any{"dag_id": dags[rng.IntN(nDags)], "from_date": ts(from),
				"to_date": ts(from.AddDate(0, 0, 1+rng.IntN(9))), "max_active_runs": 1 + rng.IntN(4),
				"run_backwards": rng.IntN(3) == 0}
			a, err := pick(rng).do(ctx, http.MethodPost, "/api/v1/backfills", body)
			switch expect("create", a, err, map[int]string{201: "", 409: "backfill_already_running"}) {
			case http.StatusCreated:
				var b api.Backfill
				if json.Unmarshal(a.Body, &b) == nil {
					created.Add(1)
					known.Lock()
					known.ids = append(known.ids, b.Id)
					known.Unlock()
				}
			case http.StatusConflict:
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	goLoad(150, func(rng *rand.Rand) {
		logical := base.AddDate(0, 0, rng.IntN(2000)).Add(time.Duration(1+rng.IntN(23)) * time.Hour)
		a, err := pick(rng).do(ctx, http.MethodPost, "/api/v1/dags/"+dags[rng.IntN(nDags)]+"/runs", map[string]any{"logical_date": ts(logical)})
		expect("manual run", a, err, map[int]string{201: "", 409: "run_already_exists"})
		time.Sleep(50 * time.Millisecond)
	})
	for i := range 4 {
		worker := fmt.Sprintf("rep-w%d", i)
		goLoad(uint64(200+i), func(rng *rand.Rand) {
			body := map[string]any{"worker_id": worker, "limit": 1 + rng.IntN(4), "lease_seconds": 300}
			if rng.IntN(5) == 0 {
				body["dag_id"] = dags[rng.IntN(nDags)]
			}
			a, err := pick(rng).do(ctx, http.MethodPost, "/api/v1/runs/claim", body)
			if expect("claim", a, err, map[int]string{200: ""}) != http.StatusOK {
				return
			}
			cr, ok := loadkit.Decode[api.ClaimResponse](&fails, "claim", a.Body)
			if !ok {
				return
			}
			claimed.Add(int64(len(cr.Runs)))
			if len(cr.Runs) == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			for _, r := range cr.Runs {
				if rng.IntN(20) == 0 {
					abandoned.Lock()
					abandoned.runs = append(abandoned.runs, r)
					abandoned.Unlock()
					continue
				}
				if rng.IntN(4) == 0 {
					a, err := pick(rng).do(ctx, http.MethodPost, fmt.Sprintf("/api/v1/runs/%d/heartbeat", r.Id), map[string]any{"worker_id": worker})
					expect("heartbeat", a, err, map[int]string{200: "", 409: "lease_lost"})
				}
				state := []string{"success", "success", "success", "failed", "canceled"}[rng.IntN(5)]
				a, err := pick(rng).do(ctx, http.MethodPatch, "/api/v1/dags/"+r.DagId+"/runs/"+url.PathEscape(r.RunId),
					map[string]any{"state": state, "worker_id": worker})
				if expect("report", a, err, map[int]string{200: "", 409: "lease_lost"}) == http.StatusOK {
					reported.Add(1)
				}
			}
		})
	}
	goLoad(300, func(rng *rand.Rand) {
		known.Lock()
		if len(known.ids) == 0 {
			known.Unlock()
			time.Sleep(10 * time.Millisecond)
			return
		}
		id := known.ids[len(known.ids)-1-rng.IntN(min(len(known.ids), 2*nDags))]
		known.Unlock()
		action := []string{"pause", "pause", "unpause", "unpause", "unpause", "cancel"}[rng.IntN(6)]
		a, err := pick(rng).do(ctx, http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/%s", id, action), nil)
		if expect(action, a, err, map[int]string{200: "", 409: "backfill_not_active"}) == http.StatusOK {
			actions.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
	})

	// The checker: invariants in one snapshot, and each process's pool size.
	var checkpoints, peakA, peakB int
	var peakRun peakRunning
	stopChecker := loadkit.Every(500*time.Millisecond, func() {
		v, peak, err := checkInvariants(tdb.DB)
		if err != nil {
			fails.Add("invariants: %v", err)
			return
		}
		checkpoints++
		peakRun = peakRun.higher(peak)
		for _, s := range v {
			fails.Add("checkpoint %d: %s", checkpoints, s)
		}
		b := backends(t, tdb.Name)
		peakA, peakB = max(peakA, b["bf_replica_a"]), max(peakB, b["bf_replica_b"])
	})
	// Sample the pools more often than the invariants.
	go func() {
		for !stop.Load() {
			b := backends(t, tdb.Name)
			if b["bf_replica_a"] > maxConns+leaseConns || b["bf_replica_b"] > maxConns+leaseConns {
				fails.Add("a process holds more than DB_MAX_CONNS=%d + DB_LEASE_MAX_CONNS=%d sessions: %v", maxConns, leaseConns, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	time.Sleep(loadFor)
	stop.Store(true)
	load.Wait()
	stopChecker()
	fails.check(t)
	v, _, err := checkInvariants(tdb.DB)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range v {
		t.Errorf("after the load: %s", s)
	}

	// Finish every run: report the abandoned ones as their workers, unpause, claim and
	// report the rest.
	c := clients[0]
	for _, r := range abandoned.runs {
		a, err := c.do(ctx, http.MethodPatch, "/api/v1/dags/"+r.DagId+"/runs/"+url.PathEscape(r.RunId),
			map[string]any{"state": "success", "worker_id": *r.WorkerId})
		if err != nil || (a.Status != http.StatusOK && a.Status != http.StatusConflict) {
			t.Fatalf("report abandoned run %d: %v %v", r.Id, a, err)
		}
	}
	var paused []int64
	if err := tdb.DB.Select(&paused, `SELECT id FROM backfills WHERE state = 'paused' ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	for i, id := range paused {
		clients[i%2].must(t, http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/unpause", id), nil, 200, 409)
	}
	drained := 0
	for round := 0; ; round++ {
		a := clients[round%2].must(t, http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": "drain", "limit": 100, "lease_seconds": 600}, 200)
		runs := decode[api.ClaimResponse](t, a).Runs
		if len(runs) == 0 {
			var unfinished int
			if err := tdb.DB.Get(&unfinished, `SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')`); err != nil {
				t.Fatal(err)
			}
			if unfinished == 0 {
				break
			}
			if round > 10000 {
				t.Fatalf("%d runs remain unfinished and unclaimable", unfinished)
			}
			continue
		}
		for i, r := range runs {
			clients[i%2].must(t, http.MethodPatch, "/api/v1/dags/"+r.DagId+"/runs/"+url.PathEscape(r.RunId),
				map[string]any{"state": "success", "worker_id": "drain"}, 200)
		}
		drained += len(runs)
	}

	// One last backfill, created after the drain, whose single run is the last to finish:
	// from that report on, every backfill must be terminal within two sweep intervals.
	c.must(t, http.MethodPut, "/api/v1/dags/replica_last", map[string]any{"schedule": "@daily"}, 201)
	c.must(t, http.MethodPost, "/api/v1/backfills", map[string]any{"dag_id": "replica_last",
		"from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-01T00:00:00Z"}, 201)
	last := decode[api.ClaimResponse](t, clients[1].must(t, http.MethodPost, "/api/v1/runs/claim",
		map[string]any{"worker_id": "drain", "dag_id": "replica_last"}, 200)).Runs
	if len(last) != 1 {
		t.Fatalf("claimed %d runs of the last backfill, want 1", len(last))
	}
	clients[0].must(t, http.MethodPatch, "/api/v1/dags/replica_last/runs/"+url.PathEscape(last[0].RunId),
		map[string]any{"state": "success", "worker_id": "drain"}, 200)
	lastReport := time.Now()
	drained++

	// Every backfill terminal within two sweep intervals of the last run finishing.
	deadline := lastReport.Add(2 * interval)
	var active int
	for {
		if err := tdb.DB.Get(&active, `SELECT count(*) FROM backfills WHERE state IN ('running', 'paused', 'canceling')`); err != nil {
			t.Fatal(err)
		}
		if active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backfills still active %s after the last run finished (two sweep intervals: %s)",
				active, time.Since(lastReport).Round(time.Millisecond), 2*interval)
		}
		time.Sleep(5 * time.Millisecond)
	}
	allTerminal := time.Since(lastReport)
	v, _, err = checkInvariants(tdb.DB)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range v {
		t.Errorf("after the drain: %s", s)
	}
	final := []struct {
		State string `db:"state"`
		N     int    `db:"n"`
	}{}
	if err := tdb.DB.Select(&final, `SELECT state, count(*) AS n FROM backfills GROUP BY state ORDER BY state`); err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, f := range final {
		states = append(states, fmt.Sprintf("%s %d", f.State, f.N))
	}
	for _, p := range procs {
		for _, l := range p.LogsWithLevel("ERROR") {
			t.Errorf("%s logged an error: %s", p.name, l)
		}
	}
	t.Logf("two replicas, %s of load: %d requests (%s); backfills created %d, runs claimed %d, reported %d, abandoned %d, pause/unpause/cancel ok %d",
		loadFor, tally.total(), tally.String(), created.Load(), claimed.Load(), reported.Load(), len(abandoned.runs), actions.Load())
	t.Logf("invariants held at %d checkpoints and at the end; peak running/max_active_runs %s; peak sessions per process %d and %d (DB_MAX_CONNS=%d + DB_LEASE_MAX_CONNS=%d)",
		checkpoints, peakRun, peakA, peakB, maxConns, leaseConns)
	t.Logf("drain: %d runs finished; every backfill terminal %s after the last run finished (limit %s); final %s",
		drained, allTerminal.Round(time.Millisecond), 2*interval, strings.Join(states, ", "))
}

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
	"github.com/stretchr/testify/require"
)

// loadFailures collects failures seen on load goroutines; the test fails on them at the end.
type loadFailures struct{ loadkit.Failures }

// expect records a transport error, a spec violation, a 5xx, or an answer outside allowed
// (status -> problem code, "" for a success answer). It returns the status, 0 on error.
func (l *loadFailures) expect(op string, res *response, err error, allowed map[int]string) int {
	codes := make(map[int][]string, len(allowed))
	for status, code := range allowed {
		if code != "" {
			codes[status] = []string{code}
		} else {
			codes[status] = nil
		}
	}
	return l.expectCodes(op, res, err, codes)
}

// expectCodes is expect where one status may carry several codes.
func (l *loadFailures) expectCodes(op string, res *response, err error, allowed map[int][]string) int {
	if err != nil {
		l.Add("%s: %v", op, err)
		return 0
	}
	if res.Status >= 500 {
		l.Add("%s answered %d: %s", op, res.Status, res.Body)
		return 0
	}
	codes, ok := allowed[res.Status]
	if !ok {
		l.Add("%s answered unexpected %d: %s", op, res.Status, res.Body)
		return 0
	}
	if len(codes) > 0 {
		var p api.Problem
		if err := json.Unmarshal(res.Body, &p); err != nil || !slices.Contains(codes, string(p.Code)) {
			l.Add("%s answered %d with code %q, want one of %v: %s", op, res.Status, p.Code, codes, res.Body)
			return 0
		}
	}
	return res.Status
}

// weighted is a choice for pickWeighted: value, as likely as weight.
type weighted struct {
	weight int
	value  string
}

// pickWeighted picks one of choices by weight with one draw of rng over the total weight, the
// first choice taking the lowest draws.
func pickWeighted(rng *rand.Rand, choices ...weighted) string {
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	p := rng.IntN(total)
	for _, c := range choices {
		if p < c.weight {
			return c.value
		}
		p -= c.weight
	}
	panic("pickWeighted: no choice")
}

// raceCounters are the figures the race test logs.
type raceCounters struct {
	createReqs, created, createConflicts      atomic.Int64
	claimReqs, claimed                        atomic.Int64
	reportsOK, reportsLost, reportsRefused    atomic.Int64
	abandoned, heartbeats, heartbeatsLost     atomic.Int64
	manualCreated                             atomic.Int64
	actionsOK, actionsRefused, cancels, reads atomic.Int64
	sweepPasses, clockAdvances                atomic.Int64
}

// The acceptance race test: several DAGs, creators, claimers and reporters, pause/unpause/
// cancel, two sweepers in tight loops and a clock that makes leases expire, for a few
// seconds; the database invariants are checked at checkpoints during the load and at the end.
func TestRaceLifecycleInvariantsUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		nDags    = 6
		nWorkers = 6
		loadFor  = 6 * time.Second
	)
	e := newEnv(t)
	// PATCHes lower max_active_runs below what runs: check the limit at each claim's commit.
	e.InstallClaimAudit()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	dags := make([]string, nDags)
	for i := range dags {
		dags[i] = fmt.Sprintf("lc_race_%d", i)
		e.PutDagWith(dags[i], "@daily", "max_active_runs", 2)
	}
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

	var (
		c     raceCounters
		errs  loadFailures
		stop  atomic.Bool
		load  sync.WaitGroup
		known struct {
			sync.Mutex
			ids []int64
		}
	)
	pickBackfill := func(rng *rand.Rand) (int64, bool) {
		known.Lock()
		defer known.Unlock()
		if len(known.ids) == 0 {
			return 0, false
		}
		// Mostly recent ones: those are the active ones.
		window := min(len(known.ids), 3*nDags)
		return known.ids[len(known.ids)-1-rng.IntN(window)], true
	}
	goLoad := loadkit.Looper(&load, &stop, seed)

	// Creators.
	for i := range 2 {
		goLoad(uint64(100+i), func(rng *rand.Rand) {
			from := base.AddDate(0, 0, rng.IntN(1500))
			body := backfillBody(dags[rng.IntN(nDags)], from, from.AddDate(0, 0, rng.IntN(10)),
				"max_active_runs", 1+rng.IntN(4),
				"run_backwards", rng.IntN(4) == 0,
				"reprocess_behavior", "none")
			if rng.IntN(5) == 0 {
				body["dag_run_conf"] = map[string]any{"k": rng.IntN(100)}
			}
			c.createReqs.Add(1)
			res, err := e.do(http.MethodPost, "/api/v1/backfills", body)
			switch errs.expect("create backfill", res, err, map[int]string{201: "", 409: "backfill_already_running"}) {
			case http.StatusCreated:
				b, ok := loadkit.Decode[api.Backfill](&errs, "backfill", res.Body)
				if !ok {
					return
				}
				c.created.Add(1)
				known.Lock()
				known.ids = append(known.ids, b.Id)
				known.Unlock()
			case http.StatusConflict:
				c.createConflicts.Add(1)
			}
		})
	}

	// Workers: claim, sometimes heartbeat, report (or abandon the run to its lease).
	for i := range nWorkers {
		worker := fmt.Sprintf("w%d", i)
		goLoad(uint64(200+i), func(rng *rand.Rand) {
			if i == 0 && rng.IntN(4) == 0 {
				logical := base.AddDate(0, 0, rng.IntN(1500))
				res, err := e.do(http.MethodPost, "/api/v1/dags/"+dags[rng.IntN(nDags)]+"/runs",
					map[string]any{"logical_date": ts(logical)})
				if errs.expect("create manual run", res, err, map[int]string{201: "", 409: "run_already_exists"}) == http.StatusCreated {
					c.manualCreated.Add(1)
				}
			}
			body := map[string]any{"worker_id": worker, "limit": 1 + rng.IntN(5),
				"lease_seconds": []int{30, 300, 600}[rng.IntN(3)]}
			if rng.IntN(10) == 0 {
				body["dag_id"] = dags[rng.IntN(nDags)]
			}
			c.claimReqs.Add(1)
			res, err := e.do(http.MethodPost, claimPath, body)
			if errs.expect("claim", res, err, map[int]string{200: ""}) != http.StatusOK {
				return
			}
			claim, ok := loadkit.Decode[api.ClaimResponse](&errs, "claim", res.Body)
			if !ok {
				return
			}
			c.claimed.Add(int64(len(claim.Runs)))
			for _, run := range claim.Runs {
				if run.State != "running" || run.WorkerId == nil || *run.WorkerId != worker {
					errs.Add("claimed run not running for %s: %+v", worker, run)
				}
				if rng.IntN(20) == 0 {
					c.abandoned.Add(1)
					continue
				}
				if rng.IntN(5) == 0 {
					c.heartbeats.Add(1)
					res, err := e.do(http.MethodPost, heartbeatPath(run.Id), map[string]any{"worker_id": worker})
					if errs.expect("heartbeat", res, err, map[int]string{200: "", 409: "lease_lost"}) == http.StatusConflict {
						c.heartbeatsLost.Add(1)
					}
				}
				state := pickWeighted(rng, weighted{2, "failed"}, weighted{1, "canceled"}, weighted{7, "success"})
				patch := map[string]any{"state": state, "worker_id": worker}
				allowed := map[int]string{200: "", 409: "lease_lost"}
				if rng.IntN(20) == 0 {
					delete(patch, "worker_id")
					allowed = map[int]string{200: "", 409: "invalid_transition"}
				}
				res, err := e.do(http.MethodPatch, runPath(run.DagId, run.RunId), patch)
				switch errs.expect("report", res, err, allowed) {
				case http.StatusOK:
					c.reportsOK.Add(1)
				case http.StatusConflict:
					if patch["worker_id"] != nil {
						c.reportsLost.Add(1)
					} else {
						c.reportsRefused.Add(1)
					}
				}
			}
		})
	}

	// Controller: pause, unpause, cancel and read random recent backfills.
	goLoad(300, func(rng *rand.Rand) {
		id, ok := pickBackfill(rng)
		if !ok {
			return
		}
		if rng.IntN(8) == 0 {
			c.reads.Add(1)
			res, err := e.do(http.MethodGet, backfillPath(id), nil)
			if errs.expect("get backfill", res, err, map[int]string{200: ""}) == http.StatusOK {
				b, ok := loadkit.Decode[api.Backfill](&errs, "backfill", res.Body)
				if !ok {
					return
				}
				p := b.Progress
				terminal := b.State == "succeeded" || b.State == "failed" || b.State == "canceled"
				if p.Total != p.Queued+p.Running+p.Success+p.Failed+p.Canceled+p.Skipped ||
					b.IsPaused != (b.State == "paused") || (b.CompletedAt != nil) != terminal ||
					(terminal && p.Queued+p.Running > 0) {
					errs.Add("inconsistent backfill read: %s", res.Body)
				}
			}
			return
		}
		action := pickWeighted(rng, weighted{7, "pause"}, weighted{3, "cancel"}, weighted{10, "unpause"})
		if action == "cancel" {
			c.cancels.Add(1)
		}
		res, err := e.do(http.MethodPut, backfillPath(id)+"/"+action, nil)
		switch errs.expect(action, res, err, map[int]string{200: "", 409: "backfill_not_active"}) {
		case http.StatusOK:
			c.actionsOK.Add(1)
		case http.StatusConflict:
			c.actionsRefused.Add(1)
		}
	})

	// Operator: failure budgets, PATCHes, retries, releases and notes (operator_race_test.go).
	operator := startOperatorLoad(e, goLoad, pickBackfill, func(id int64) {
		known.Lock()
		known.ids = append(known.ids, id)
		known.Unlock()
	}, &errs, dags)

	// Two sweepers, as two replicas would run them, in tight loops.
	for i := range 2 {
		sw := sweeper.New(e.Store, sweeper.Config{Batch: 50})
		goLoad(uint64(400+i), func(*rand.Rand) {
			if err := sw.RunOnce(context.Background()); err != nil {
				errs.Add("sweeper %d: %v", i, err)
			}
			c.sweepPasses.Add(1)
		})
	}

	// The clock: one goroutine moves it 400 s about every second, past the 30 s and 300 s
	// leases.
	stopClock := loadkit.Every(time.Second, func() {
		e.Clock.Advance(400 * time.Second)
		c.clockAdvances.Add(1)
	})

	// Checker: the invariants in one database snapshot about every 500 ms; a terminal
	// backfill's record must never change again.
	var (
		checkpoints int
		peak        invariantReport
	)
	terminalSeen := map[int64]terminalRow{}
	observe := func(s invariantReport) {
		checkpoints++
		if s.PeakRatio > peak.PeakRatio || (s.PeakRatio == peak.PeakRatio && s.PeakRunning > peak.PeakRunning) {
			peak.PeakRatio, peak.PeakRunning, peak.PeakMax = s.PeakRatio, s.PeakRunning, s.PeakMax
		}
		for id, was := range terminalSeen {
			now, ok := s.Terminal[id]
			if !ok {
				t.Errorf("terminal backfill %d is no longer terminal", id)
			} else if now != was {
				t.Errorf("terminal backfill %d changed: %+v -> %+v", id, was, now)
			}
		}
		for id, row := range s.Terminal {
			terminalSeen[id] = row
		}
	}
	stopChecker := loadkit.Every(500*time.Millisecond, func() { observe(checkInvariants(t, e.DB)) })

	started := time.Now()
	<-time.After(loadFor) // the load's duration
	stop.Store(true)
	stopClock()
	load.Wait()
	stopChecker()
	loadTook := time.Since(started)

	nErrs, errMsgs := errs.Summary()
	require.Zero(t, nErrs, "load errors (%d):\n%s", nErrs, errMsgs)
	// The load really ran: a run that created, claimed, reported or swept nothing (a harness
	// that broke, every request refused) would otherwise pass on invariants that hold vacuously.
	for name, n := range map[string]int64{
		"backfills created": c.created.Load(),
		"runs claimed":      c.claimed.Load(),
		"reports accepted":  c.reportsOK.Load(),
		"sweep passes":      c.sweepPasses.Load(),
		"clock advances":    c.clockAdvances.Load(),
	} {
		require.Positive(t, n, "the load produced no %s", name)
	}
	observe(checkInvariants(t, e.DB))

	// (e) Load stopped: one pass finalizes every active backfill whose runs are all terminal.
	e.SweepOnce()
	require.Empty(t, activeButFinished(t, e.DB), "active backfills with all runs terminal after one pass")
	observe(checkInvariants(t, e.DB))

	// Drain: expire every lease, unpause, claim and report everything; one pass then leaves
	// no active backfill.
	e.Clock.Advance(3601 * time.Second)
	e.SweepOnce()
	var paused []int64
	require.NoError(t, e.DB.Select(&paused, `SELECT id FROM backfills WHERE state = 'paused' ORDER BY id`))
	for _, id := range paused {
		e.ActionOK(id, "unpause")
	}
	drained := 0
	for {
		runs := e.ClaimWith(map[string]any{"worker_id": "drain", "limit": 100, "lease_seconds": 3600})
		if len(runs) == 0 {
			break
		}
		for _, r := range runs {
			e.Report(r, "success")
		}
		drained += len(runs)
	}
	var unfinished int
	require.NoError(t, e.DB.Get(&unfinished, `SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')`))
	require.Zero(t, unfinished, "runs left unfinished after the drain")
	leftForSweep := len(activeButFinished(t, e.DB))
	e.SweepOnce()
	require.Empty(t, activeButFinished(t, e.DB))
	var active int
	require.NoError(t, e.DB.Get(&active, `SELECT count(*) FROM backfills WHERE state IN ('running', 'paused', 'canceling')`))
	require.Zero(t, active, "active backfills after the drain and one pass")
	observe(checkInvariants(t, e.DB))

	final := []struct {
		State string `db:"state"`
		N     int    `db:"n"`
	}{}
	require.NoError(t, e.DB.Select(&final, `SELECT state, count(*) AS n FROM backfills GROUP BY state ORDER BY state`))
	var requeued, runsTotal int
	require.NoError(t, e.DB.Get(&requeued, `SELECT count(*) FROM dag_runs WHERE attempt > 1`))
	require.NoError(t, e.DB.Get(&runsTotal, `SELECT count(*) FROM dag_runs`))

	t.Logf("load %s: backfills created %d of %d requests (%d answered 409), manual runs %d, runs total %d",
		loadTook.Round(time.Millisecond), c.created.Load(), c.createReqs.Load(), c.createConflicts.Load(),
		c.manualCreated.Load(), runsTotal)
	t.Logf("claims %d handing out %d runs; reports ok %d, lease_lost %d, refused without worker %d; abandoned %d; heartbeats %d (%d lost); runs with attempt > 1: %d",
		c.claimReqs.Load(), c.claimed.Load(), c.reportsOK.Load(), c.reportsLost.Load(), c.reportsRefused.Load(),
		c.abandoned.Load(), c.heartbeats.Load(), c.heartbeatsLost.Load(), requeued)
	t.Logf("pause/unpause/cancel: %d ok, %d backfill_not_active (%d cancels asked); backfill reads %d",
		c.actionsOK.Load(), c.actionsRefused.Load(), c.cancels.Load(), c.reads.Load())
	t.Logf("sweep passes %d (two sweepers), clock advances %d, checkpoints %d, drained runs %d, backfills finalized by the last pass %d",
		c.sweepPasses.Load(), c.clockAdvances.Load(), checkpoints, drained, leftForSweep)
	t.Logf("peak running/max_active_runs %d/%d (%.2f)", peak.PeakRunning, peak.PeakMax, peak.PeakRatio)
	operator.log(t)
	for _, f := range final {
		t.Logf("backfills %s: %d", f.State, f.N)
	}
}

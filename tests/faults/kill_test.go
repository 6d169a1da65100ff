//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A window of 99,999 minutes of an every-minute schedule: 100,000 slots, the default
// MAX_BACKFILL_RUNS, all in the past.
var (
	bigFrom = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	bigTo   = bigFrom.Add(99_999 * time.Minute)
)

const bigSlots = 100_000

func bigBackfillBody(dagID string) map[string]any {
	return map[string]any{"dag_id": dagID, "from_date": ts(bigFrom), "to_date": ts(bigTo), "max_active_runs": 10}
}

// activeQuery reports whether a session of app on the database is running a statement whose
// text matches pattern (a POSIX regular expression).
func activeQuery(t testing.TB, dbName, app, pattern string) bool {
	t.Helper()
	var n int
	if err := admin(t).Get(&n, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = $1 AND application_name = $2 AND state = 'active' AND query ~ $3`,
		dbName, app, pattern); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n > 0
}

// bulkInsert matches the creation's bulk insert of runs as pg_stat_activity shows it: one
// INSERT ... SELECT, or COPY when the window has no run yet (repo/backfill_copy.go).
const bulkInsert = `INSERT INTO dag_runs|COPY dag_runs`

// waitActiveQuery polls pg_stat_activity until the statement runs; false if done closes first.
func waitActiveQuery(t testing.TB, dbName, app, pattern string, done <-chan struct{}, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if activeQuery(t, dbName, app, pattern) {
			return true
		}
		select {
		case <-done:
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return false
}

// TestKillDuringHugeCreation sends SIGKILL to the server while it creates a 100,000-slot
// backfill, at several points of the creating transaction. Afterwards the database holds the
// whole backfill or nothing; a restarted server then creates the backfill at once, or answers
// 409 only because the whole one committed.
func TestKillDuringHugeCreation(t *testing.T) {
	type killPoint struct {
		name string
		// atOnce restarts the server and sends the new POST without waiting for the killed
		// process's backend to finish.
		atOnce bool
		// when waits for the moment to kill; it may give up early when the answer came.
		when func(t *testing.T, dbName, app string, answered <-chan struct{}, sent time.Time)
	}
	afterSend := func(d time.Duration) func(*testing.T, string, string, <-chan struct{}, time.Time) {
		return func(_ *testing.T, _, _ string, answered <-chan struct{}, sent time.Time) {
			select {
			case <-answered:
			case <-time.After(time.Until(sent.Add(d))):
			}
		}
	}
	duringInsert := func(extra time.Duration) func(*testing.T, string, string, <-chan struct{}, time.Time) {
		return func(t *testing.T, dbName, app string, answered <-chan struct{}, _ time.Time) {
			if !waitActiveQuery(t, dbName, app, bulkInsert, answered, 60*time.Second) {
				t.Logf("the bulk INSERT was never seen active")
				return
			}
			select {
			case <-answered:
			case <-time.After(extra):
			}
		}
	}
	points := []killPoint{
		{name: "300 ms after sending (planning)", when: afterSend(300 * time.Millisecond)},
		{name: "as soon as the bulk INSERT runs", when: duringInsert(0)},
		{name: "1 s into the bulk INSERT", when: duringInsert(time.Second)},
		{name: "1 s into the bulk INSERT, restart at once", atOnce: true, when: duringInsert(time.Second)},
		{name: "as the bulk INSERT ends (last statements, COMMIT)", when: func(t *testing.T, dbName, app string, answered <-chan struct{}, _ time.Time) {
			if !waitActiveQuery(t, dbName, app, bulkInsert, answered, 60*time.Second) {
				t.Logf("the bulk INSERT was never seen active")
				return
			}
			for activeQuery(t, dbName, app, bulkInsert) {
				select {
				case <-answered:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}},
		{name: "right after the 201 answer", when: func(_ *testing.T, _, _ string, answered <-chan struct{}, _ time.Time) {
			<-answered
		}},
	}

	type outcome struct {
		point, result, postAfter string
		orphan, killedAfter      time.Duration
	}
	var outcomes []outcome
	for i, kp := range points {
		ok := t.Run(fmt.Sprintf("kill_%d", i+1), func(t *testing.T) {
			tdb := newTestDB(t)
			app := fmt.Sprintf("bf_kill_%d", i+1)
			srv := startProc(t, app, tdb.DSN, "SWEEP_INTERVAL=200ms")
			c := newClient(srv.URL, false)
			c.must(t, http.MethodPut, "/api/v1/dags/every_minute", map[string]any{"schedule": "* * * * *"}, 201)

			answered := make(chan struct{})
			var firstAnswer *answer
			var firstErr error
			sent := time.Now()
			go func() {
				defer close(answered)
				firstAnswer, firstErr = c.do(context.Background(), http.MethodPost, "/api/v1/backfills", bigBackfillBody("every_minute"))
			}()
			kp.when(t, tdb.Name, app, answered, sent)
			killedAfter := time.Since(sent)
			srv.Kill()
			<-answered
			if firstErr == nil && firstAnswer.Status != http.StatusCreated {
				t.Fatalf("the creation answered %s", firstAnswer)
			}
			switch {
			case firstErr != nil:
				t.Logf("the killed request failed as expected: %v", firstErr)
			default:
				t.Logf("the request was answered before the kill: %s", firstAnswer)
			}

			if kp.atOnce {
				// The killed process's backend is still running its INSERT. A new POST from a
				// restarted server waits on the rows it holds, then goes through (or is 409 if
				// the killed one committed): the database ends with exactly one backfill.
				srv2 := startProc(t, app+"_restarted", tdb.DSN, "SWEEP_INTERVAL=200ms")
				restarted := time.Since(sent) - killedAfter
				start := time.Now()
				a, err := newClient(srv2.URL, false).do(context.Background(), http.MethodPost, "/api/v1/backfills", bigBackfillBody("every_minute"))
				took := time.Since(start)
				if err != nil {
					t.Fatalf("POST after restart: %v", err)
				}
				waitNoBackends(t, tdb.Name, app)
				if got := countRows(t, tdb.DB); got.Backfills != 1 || got.Runs != bigSlots || got.Slots != bigSlots {
					t.Fatalf("after kill, restart and POST: %+v, want one backfill of %d runs", got, bigSlots)
				}
				var only int64
				if err := tdb.DB.Get(&only, `SELECT id FROM backfills`); err != nil {
					t.Fatal(err)
				}
				var result string
				switch p := a.Problem(); {
				case a.Status == http.StatusCreated && decode[struct{ ID int64 }](t, a).ID == only:
					result = "nothing"
				case a.Status == http.StatusConflict && p.ActiveBackfillID != nil && *p.ActiveBackfillID == only:
					result = "whole backfill"
				default:
					t.Fatalf("POST after restart answered %s; the database holds backfill %d", a, only)
				}
				outcomes = append(outcomes, outcome{kp.name, result,
					fmt.Sprintf("%d in %s, sent %s after the kill (it waited for the killed backend to roll back)", a.Status, took.Round(10*time.Millisecond), restarted.Round(10*time.Millisecond)),
					-1, killedAfter})
				return
			}

			// The killed server's backend finishes its statement, finds the client gone and
			// rolls back (or commits, if COMMIT had been sent). Only then is the outcome final.
			orphan := waitNoBackends(t, tdb.Name, app)
			got := countRows(t, tdb.DB)
			var result string
			switch got {
			case counts{}:
				result = "nothing"
			case counts{Backfills: 1, Runs: bigSlots, Slots: bigSlots}:
				result = "whole backfill"
				var state string
				var total int
				if err := tdb.DB.QueryRow(`SELECT state, num_queued FROM backfills`).Scan(&state, &total); err != nil {
					t.Fatal(err)
				}
				if state != "running" || total != bigSlots {
					t.Errorf("the committed backfill is %s with %d queued runs, want running with %d", state, total, bigSlots)
				}
			default:
				t.Fatalf("after SIGKILL the database holds a partial backfill: %+v", got)
			}
			if firstErr == nil && firstAnswer.Status == http.StatusCreated && result != "whole backfill" {
				t.Fatalf("the server answered 201 but the database holds %s", result)
			}

			// A restarted server: the DAG is not blocked by an orphan.
			srv2 := startProc(t, app+"_restarted", tdb.DSN, "SWEEP_INTERVAL=200ms")
			c2 := newClient(srv2.URL, false)
			start := time.Now()
			a, err := c2.do(context.Background(), http.MethodPost, "/api/v1/backfills", bigBackfillBody("every_minute"))
			took := time.Since(start)
			if err != nil {
				t.Fatalf("POST after restart: %v", err)
			}
			var postAfter string
			switch result {
			case "nothing":
				if a.Status != http.StatusCreated {
					t.Fatalf("nothing committed, yet the POST after restart answered %s", a)
				}
				postAfter = fmt.Sprintf("201 in %s", took.Round(10*time.Millisecond))
			case "whole backfill":
				p := a.Problem()
				var committed int64
				if err := tdb.DB.Get(&committed, `SELECT id FROM backfills`); err != nil {
					t.Fatal(err)
				}
				if a.Status != http.StatusConflict || p.Code != "backfill_already_running" ||
					p.ActiveBackfillID == nil || *p.ActiveBackfillID != committed {
					t.Fatalf("the whole backfill %d committed; want 409 naming it, got %s", committed, a)
				}
				postAfter = fmt.Sprintf("409 backfill_already_running (id %d) in %s", committed, took.Round(10*time.Millisecond))
			}
			if got := countRows(t, tdb.DB); got.Backfills != 1 || got.Runs != bigSlots || got.Slots != bigSlots {
				t.Fatalf("after the POST that followed the restart: %+v, want one backfill of %d runs", got, bigSlots)
			}
			if errs := srv2.LogsWithLevel("ERROR"); len(errs) > 0 {
				t.Errorf("the restarted server logged errors:\n%s", strings.Join(errs, "\n"))
			}
			outcomes = append(outcomes, outcome{kp.name, result, postAfter, orphan, killedAfter})
		})
		if !ok {
			break
		}
	}
	for _, o := range outcomes {
		orphan := "killed backend gone after " + o.orphan.Round(time.Millisecond).String()
		if o.orphan < 0 {
			orphan = "restarted without waiting"
		}
		t.Logf("kill %-50s at %6s: database held %-14s (%s); POST after restart: %s",
			o.point, o.killedAfter.Round(time.Millisecond), o.result, orphan, o.postAfter)
	}
}

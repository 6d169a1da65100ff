//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/lib/pq"
)

// raceWindow is how long before the drain a request may have been refused at connect
// (the client's connect can lag behind its start on a busy machine).
const raceWindow = 100 * time.Millisecond

// maxDropWindow bounds how long before the drain a request may have been sent and still not
// have been read by the server when the drain began. Under the race detector, with 100,000-slot
// requests keeping both cores busy, reading a request can lag by a few hundred milliseconds;
// the access-log check, not this bound, is what proves such a request was never processed.
const maxDropWindow = time.Second

// isDropped reports an HTTP exchange whose connection closed before any answer.
func isDropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// TestSigtermDrainsInFlightRequests sends SIGTERM while clients create, claim and report and
// while a 100,000-run creation and three 100,000-slot dry runs are in flight. Every request
// the server had started gets its normal answer (the slow ones too: 201/200, and the creation
// is whole in the database); from the drain on, new connections are refused; a request that
// was sent just as the drain began and not yet read is closed unanswered and never processed
// (its X-Request-Id is absent from the access log, a creation's description from the
// database); the sweep stops, "stopped" is the last log line, and the process exits 0.
func TestSigtermDrainsInFlightRequests(t *testing.T) {
	tdb := newTestDB(t)
	const app = "bf_sigterm"
	// A long admission wait: eight requests at once (four of them seconds long) fill the
	// default class of the harness's pool of 8, and this test is about the drain, not about
	// shedding; they queue for a slot instead of being answered 503 busy.
	srv := startProc(t, app, tdb.DSN, "SWEEP_INTERVAL=100ms", "SHUTDOWN_TIMEOUT=90s", "ADMISSION_WAIT=1m")
	// No keep-alive: every request is its own connection, so that "accepted" is unambiguous
	// and a request after the listener closed is refused at connect.
	c := newClient(srv.URL, false)
	c.must(t, http.MethodPut, "/api/v1/dags/big", map[string]any{"schedule": "* * * * *"}, 201)
	c.must(t, http.MethodPut, "/api/v1/dags/big_dry", map[string]any{"schedule": "* * * * *"}, 201)
	dags := []string{"term_0", "term_1", "term_2", "term_3"}
	for _, d := range dags {
		c.must(t, http.MethodPut, "/api/v1/dags/"+d, map[string]any{"schedule": "@hourly", "max_active_runs": 8}, 201)
	}

	type result struct {
		op         string
		tag        string // description of a creation, to find it in the database
		requestID  string // X-Request-Id, which the access log repeats
		start, end time.Time
		status     int
		err        error
	}
	var (
		mu      sync.Mutex
		results []result
		stop    atomic.Bool
		load    sync.WaitGroup
		seed    = uint64(time.Now().UnixNano())
	)
	record := func(op, tag, requestID string, start time.Time, a *answer, err error) *answer {
		r := result{op: op, tag: tag, requestID: requestID, start: start, end: time.Now(), err: err}
		if a != nil {
			r.status = a.Status
		}
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
		return a
	}
	var createN, requestN atomic.Int64
	send := func(op, tag, method, path string, body any) *answer {
		start := time.Now()
		id := fmt.Sprintf("sigterm-req-%d", requestN.Add(1))
		a, err := c.do(context.Background(), method, path, body, "X-Request-Id", id)
		if err != nil {
			time.Sleep(50 * time.Millisecond) // refused: the server is going away
		}
		return record(op, tag, id, start, a, err)
	}

	// The slow requests.
	slow := make(chan result, 4)
	goSlow := func(op, path string, body any) {
		go func() {
			start := time.Now()
			a, err := c.do(context.Background(), http.MethodPost, path, body)
			r := result{op: op, start: start, end: time.Now(), err: err}
			if a != nil {
				r.status = a.Status
			}
			slow <- r
		}()
	}

	// Steady load.
	for i := range 4 {
		load.Add(1)
		go func() {
			defer load.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			worker := fmt.Sprintf("term-w%d", i)
			for !stop.Load() {
				switch rng.IntN(3) {
				case 0:
					from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(20000)) * time.Hour)
					tag := fmt.Sprintf("sigterm-%d", createN.Add(1))
					send("create", tag, http.MethodPost, "/api/v1/backfills", map[string]any{"description": tag,
						"dag_id": dags[rng.IntN(len(dags))], "from_date": ts(from), "to_date": ts(from.Add(time.Duration(rng.IntN(48)) * time.Hour))})
				case 1:
					a := send("claim", "", http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": worker, "limit": 2})
					if a == nil || a.Status != http.StatusOK {
						continue
					}
					var cr api.ClaimResponse
					if json.Unmarshal(a.Body, &cr) != nil {
						continue
					}
					for _, r := range cr.Runs {
						send("report", "", http.MethodPatch, "/api/v1/dags/"+r.DagId+"/runs/"+url.PathEscape(r.RunId),
							map[string]any{"state": "success", "worker_id": worker})
					}
				default:
					send("list", "", http.MethodGet, "/api/v1/backfills?limit=20&order_by=-id", nil)
				}
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
			}
		}()
	}

	time.Sleep(500 * time.Millisecond)
	goSlow("100k creation", "/api/v1/backfills", bigBackfillBody("big"))
	if !waitActiveQuery(t, tdb.Name, app, bulkInsert, nil, 60*time.Second) {
		t.Fatal("the 100k creation's bulk INSERT was never seen running")
	}
	// Dry runs of 100,000 slots take about a second; signal while they are planning.
	for range 3 {
		goSlow("100k dry run", "/api/v1/backfills/dry_run", bigBackfillBody("big_dry"))
	}
	time.Sleep(200 * time.Millisecond)
	sigterm := time.Now()
	srv.Signal(syscall.SIGTERM)
	// The drain begins when the process logs it; under load that comes some milliseconds
	// after the signal. Requests are classified against that moment.
	drain := srv.waitLog(t, "shutting down: draining requests", 60*time.Second)
	t.Logf("the drain began %s after SIGTERM", drain.Sub(sigterm).Round(time.Millisecond))

	// While the drain runs, new requests are not served: refused at connect once the
	// listener is closed, or (a connection that was still being accepted as the listener
	// closed) dropped before any handler runs. Go's Server.Shutdown starts no new request.
	var refusedDuringDrain, droppedDuringDrain int
	for range 10 {
		a, err := c.do(context.Background(), http.MethodGet, "/healthz", nil)
		select {
		case <-srv.exited:
		default:
			switch {
			case isConnRefused(err):
				refusedDuringDrain++
			case isDropped(err):
				droppedDuringDrain++
			default:
				t.Errorf("a request during the drain was served or failed otherwise: %v %v", a, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refusedDuringDrain == 0 {
		t.Errorf("no request during the drain was refused at connect")
	}

	code, err := srv.Wait(90 * time.Second)
	exited := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	load.Wait()
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}

	// The slow requests finished with their normal answers.
	for range 4 {
		r := <-slow
		switch {
		case r.err != nil:
			t.Errorf("%s in flight at SIGTERM failed: %v", r.op, r.err)
		case r.op == "100k creation" && r.status != http.StatusCreated:
			t.Errorf("%s in flight at SIGTERM answered %d, want 201", r.op, r.status)
		case r.op == "100k dry run" && r.status != http.StatusOK:
			t.Errorf("%s in flight at SIGTERM answered %d, want 200", r.op, r.status)
		default:
			t.Logf("%s: started %s before SIGTERM, answered %d %s after it", r.op,
				sigterm.Sub(r.start).Round(time.Millisecond), r.status, r.end.Sub(sigterm).Round(time.Millisecond))
		}
	}
	var n int
	if err := tdb.DB.Get(&n, `SELECT count(*) FROM dag_runs WHERE dag_id = 'big'`); err != nil {
		t.Fatal(err)
	}
	if n != bigSlots {
		t.Errorf("the 100k creation answered during the drain left %d runs, want %d", n, bigSlots)
	}

	// The steady load: accepted requests were answered, later ones refused.
	inFlight, answered, refused, dropped := 0, 0, 0, 0
	var droppedTags []string
	droppedIDs := map[string]bool{}
	var statuses statusTally
	for _, r := range results {
		switch {
		case r.err == nil:
			answered++
			statuses.add(r.status)
			if r.status >= 500 {
				t.Errorf("%s answered %d", r.op, r.status)
			}
			if r.start.Before(drain) && r.end.After(drain) {
				inFlight++
			}
		case isConnRefused(r.err):
			refused++
			if r.start.Before(drain.Add(-raceWindow)) {
				t.Errorf("%s sent %s before the drain began was refused", r.op, drain.Sub(r.start))
			}
		case isDropped(r.err) && r.start.After(drain.Add(-maxDropWindow)):
			// Sent as the drain began, but not yet read by the server (the connection was
			// in the listen backlog when the listener closed, or accepted with its request
			// read after Shutdown began: Go's server then closes it without starting the
			// request). Never processed: its X-Request-Id is not in the access log and a
			// creation's description is not in the database (both checked below).
			dropped++
			droppedIDs[r.requestID] = true
			if r.tag != "" {
				droppedTags = append(droppedTags, r.tag)
			}
			t.Logf("%s sent %s after the drain began was dropped unanswered %s after it: %v", r.op,
				r.start.Sub(drain).Round(time.Millisecond), r.end.Sub(drain).Round(time.Millisecond), r.err)
		default:
			t.Errorf("%s (sent %s relative to the drain) failed with %v", r.op, r.start.Sub(drain), r.err)
		}
	}
	// No dropped request ran: the access log names every request a handler served.
	served := 0
	for _, l := range srv.Logs() {
		var e struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "request" && strings.HasPrefix(e.RequestID, "sigterm-req-") {
			served++
			if droppedIDs[e.RequestID] {
				t.Errorf("request %s was served (access log) but its client got no answer: %s", e.RequestID, l)
			}
		}
	}
	if served != answered {
		t.Errorf("the access log names %d load requests, the clients got %d answers", served, answered)
	}
	if len(droppedTags) > 0 {
		var found []string
		if err := tdb.DB.Select(&found, `SELECT description FROM backfills WHERE description = ANY($1)`, pq.Array(droppedTags)); err != nil {
			t.Fatal(err)
		}
		if len(found) > 0 {
			t.Errorf("creations dropped unanswered during the drain were processed: %v", found)
		}
	}
	if _, err := c.do(context.Background(), http.MethodGet, "/healthz", nil); !isConnRefused(err) {
		t.Errorf("after exit, want connection refused, got %v", err)
	}

	// Shutdown order in the log: drain, then the sweep stops, then "stopped" is the last line.
	logs := srv.Logs()
	order := []string{"shutting down: draining requests", "stopping sweeper", "stopped"}
	at := 0
	for _, l := range logs {
		if at < len(order) && strings.Contains(l, `"msg":"`+order[at]+`"`) {
			at++
		}
	}
	if at != len(order) {
		t.Errorf("log lines %v not all found in order (found %d):\n%s", order, at, strings.Join(logs[max(0, len(logs)-10):], "\n"))
	}
	if last := logs[len(logs)-1]; !strings.Contains(last, `"msg":"stopped"`) {
		t.Errorf("the last log line is not \"stopped\": %s", last)
	}
	t.Logf("SIGTERM: exit code %d after %s; steady load %d answered (%s), %d of them in flight as the drain began; after it %d refused at connect and %d dropped unprocessed as the drain began; drain probes: %d refused, %d dropped",
		code, exited.Sub(sigterm).Round(time.Millisecond), answered, statuses.String(), inFlight, refused, dropped, refusedDuringDrain, droppedDuringDrain)
}

package tests

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/stretchr/testify/require"
)

// The contract's "A change is applied at most once per request": on every write endpoint, the
// connection between the service and PostgreSQL is cut right after the server committed the
// request's change and before its answer reached the service. Nothing may send the change
// again: the answer is 503 outcome_unknown, the change is in the database exactly once, and
// every invariant holds.

// lostAnswerCase is one write endpoint: setup builds what the request needs (through the
// proxy, with no fault), request is the request, and once checks in the database that the
// change happened exactly once.
type lostAnswerCase struct {
	name  string
	setup func(e *env) (method, path string, body any)
	once  func(t *testing.T, e *env)
}

func TestAnswerLostAfterCommitIsNeverAppliedTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withProxy())
	from, to := day(1, 1), day(1, 10)
	bf := e.DailyBackfill("lost", from, to, "max_active_runs", 10)
	var claimed int64
	cases := []lostAnswerCase{
		{
			name: "claim",
			setup: func(e *env) (string, string, any) {
				return http.MethodPost, claimPath, map[string]any{"worker_id": "w1", "limit": 1}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'running'`),
					"a claim with limit 1 leased one run")
				require.NoError(t, e.DB.Get(&claimed, `SELECT id FROM dag_runs WHERE state = 'running'`))
			},
		},
		{
			name: "heartbeat",
			setup: func(e *env) (string, string, any) {
				return http.MethodPost, heartbeatPath(claimed), map[string]any{"worker_id": "w1"}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs WHERE id = $1 AND state = 'running'`, claimed))
			},
		},
		{
			name: "release",
			setup: func(e *env) (string, string, any) {
				return http.MethodPost, releasePath(claimed), map[string]any{"worker_id": "w1"}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 0, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'running'`))
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs WHERE id = $1 AND state = 'queued'`, claimed))
			},
		},
		{
			name: "report",
			setup: func(e *env) (string, string, any) {
				run := e.ClaimN(1, "w2", 1)[0]
				return http.MethodPatch, runPath(run.DagId, run.RunId), map[string]any{"state": "success", "worker_id": "w2"}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'success'`))
			},
		},
		{
			name: "patch backfill",
			setup: func(e *env) (string, string, any) {
				return http.MethodPatch, backfillPath(bf.Id), map[string]any{"max_active_runs": 3}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 3, e.Count(`SELECT max_active_runs FROM backfills WHERE id = $1`, bf.Id))
			},
		},
		{
			name: "pause",
			setup: func(e *env) (string, string, any) {
				return http.MethodPut, backfillPath(bf.Id) + "/pause", nil
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM backfills WHERE id = $1 AND state = 'paused'`, bf.Id))
			},
		},
		{
			name: "unpause",
			setup: func(e *env) (string, string, any) {
				return http.MethodPut, backfillPath(bf.Id) + "/unpause", nil
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM backfills WHERE id = $1 AND state = 'running'`, bf.Id))
			},
		},
		{
			name: "cancel",
			setup: func(e *env) (string, string, any) {
				return http.MethodPut, backfillPath(bf.Id) + "/cancel", nil
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 0, e.Count(`SELECT count(*) FROM backfills WHERE id = $1 AND state IN ('running', 'paused')`, bf.Id))
				require.Equal(t, 0, e.Count(`SELECT count(*) FROM dag_runs WHERE backfill_id = $1 AND state = 'queued'`, bf.Id))
			},
		},
		{
			name: "put new dag",
			setup: func(e *env) (string, string, any) {
				return http.MethodPut, "/api/v1/dags/fresh", map[string]any{"schedule": "@daily"}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM dags WHERE dag_id = 'fresh'`))
			},
		},
		{
			name: "create webhook",
			setup: func(e *env) (string, string, any) {
				return http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com/hook"}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhooks`), "exactly one webhook row")
			},
		},
		{
			name: "trigger run",
			setup: func(e *env) (string, string, any) {
				return http.MethodPost, "/api/v1/dags/" + url.PathEscape("fresh") + "/runs",
					map[string]any{"logical_date": ts(day(3, 1))}
			},
			once: func(t *testing.T, e *env) {
				require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs WHERE dag_id = 'fresh'`))
			},
		},
	}
	for _, c := range cases {
		method, path, body := c.setup(e)
		before := e.Proxy.Fired()
		e.Proxy.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
		res := e.Do(method, path, body)
		e.Proxy.SetRule(nil)
		require.Equal(t, before+1, e.Proxy.Fired(), "%s: the change's answer was cut once", c.name)
		p := requireProblem(t, res, http.StatusServiceUnavailable, "outcome_unknown", c.name)
		require.Equal(t, "the change may or may not have been applied; retrying with the same Idempotency-Key is safe", p.Detail, c.name)
		ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
		require.NoError(t, err, c.name)
		require.Positive(t, ra, c.name)
		t.Run(c.name, func(t *testing.T) { c.once(t, e) })
		rep := checkInvariants(t, e.DB)
		require.Empty(t, rep.Violations, fmt.Sprintf("%s: invariants", c.name))
	}
	// Each answer is counted for the alert (deploy/prometheus, BackfillOutcomeUnknown).
	metricsBody := string(e.Do(http.MethodGet, "/metrics", nil).Body)
	require.Contains(t, metricsBody, fmt.Sprintf("\nbackfill_outcome_unknown_total %d\n", len(cases)))
}

// Seeded chaos on the wire under a worker's claims and reports: the proxy cuts, resets or
// cuts after forwarding at random points (client queries, server tags and ReadyForQuery).
// Requests go one at a time, so each one's effect is the change in the database across it:
// a 200 claim leased exactly the runs it answered; a 503 other than outcome_unknown changed
// nothing (its detail must not be false); an outcome_unknown changed at most what the request
// asked for; nothing answers 500; every invariant holds at the end.
func TestChaosOnTheWireNeverAppliesAChangeTwice(t *testing.T) {
	t.Parallel()
	const seed = 20261202
	t.Logf("pgproxy.Chaos seed %d", seed)
	e := newEnv(t, withProxy())
	e.DailyBackfill("chaos", day(1, 1), day(2, 20), "max_active_runs", 100)
	running := func() int { return e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'running'`) }
	finished := func() int { return e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'success'`) }
	e.Proxy.SetRule(pgproxy.Chaos(seed, 0.08))
	tally := map[string]int{}
	for i := 0; i < 40; i++ {
		// A request whose connection the chaos cut may still be running in its backend, and
		// commit after the service answered (outcome_unknown: "may or may not have been
		// applied"): its effect would land in the next request's window. Each window starts
		// once no backend of the service is busy.
		waitServiceQuiet(t, e)
		r0, f0 := running(), finished()
		res := e.Do(http.MethodPost, claimPath, map[string]any{"worker_id": "w", "limit": 1})
		r1 := running()
		switch res.Status {
		case http.StatusOK:
			var cr struct {
				Runs []struct {
					DagID string `json:"dag_id"`
					RunID string `json:"run_id"`
				} `json:"runs"`
			}
			res.Decode(t, &cr)
			require.Equal(t, len(cr.Runs), r1-r0, "claim %d: a 200 leased exactly what it answered", i)
			tally["claim 200"]++
			for _, run := range cr.Runs {
				waitServiceQuiet(t, e)
				f1 := finished()
				rep := e.Do(http.MethodPatch, runPath(run.DagID, run.RunID), map[string]any{"state": "success", "worker_id": "w"})
				got := finished() - f1
				tally[fmt.Sprintf("report %d", rep.Status)]++
				requireEffect(t, rep, got, fmt.Sprintf("report %d", i))
			}
		default:
			tally[fmt.Sprintf("claim %d %s", res.Status, res.Problem(t).Code)]++
			requireEffect(t, res, r1-r0, fmt.Sprintf("claim %d", i))
		}
		require.GreaterOrEqual(t, finished(), f0)
	}
	e.Proxy.SetRule(nil)
	t.Logf("answers: %v; faults injected: %d", tally, e.Proxy.Fired())
	require.Positive(t, e.Proxy.Fired(), "the chaos did something")
	rep := checkInvariants(t, e.DB)
	require.Empty(t, rep.Violations)
}

// waitServiceQuiet waits until no backend of e's database other than the test's own is inside
// a statement or a transaction.
func waitServiceQuiet(t *testing.T, e *env) {
	t.Helper()
	require.Eventually(t, func() bool {
		return e.Count(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`) == 0
	}, 30*time.Second, 2*time.Millisecond, "a backend of the service stays busy")
}

// requireEffect checks an answer against the change it made (0 or 1 rows for one request):
// a success made exactly one, outcome_unknown at most one, any other 503 none, and nothing
// is a 500.
func requireEffect(t *testing.T, res *response, changed int, what string) {
	t.Helper()
	require.True(t, res.Status < 500 || res.Status == http.StatusServiceUnavailable, "%s: %d %s", what, res.Status, res.Body)
	switch {
	case res.Status == http.StatusOK:
		require.Equal(t, 1, changed, "%s: a success changed one row", what)
	case res.Status == http.StatusServiceUnavailable && res.Problem(t).Code == "outcome_unknown":
		require.LessOrEqual(t, changed, 1, "%s: outcome_unknown applied at most once", what)
	case res.Status == http.StatusServiceUnavailable:
		require.Equal(t, 0, changed, "%s: a 503 %s changed something: %s", what, res.Problem(t).Code, res.Body)
	default:
		require.NotEqual(t, http.StatusInternalServerError, res.Status, "%s: %s", what, res.Body)
	}
}

package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// txRetries reads backfill_tx_retries_total from the env's own metrics registry.
func txRetries(t testing.TB, e *env) float64 {
	t.Helper()
	res := e.Do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, res.Status)
	sc := bufio.NewScanner(bytes.NewReader(res.Body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "backfill_tx_retries_total "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// createTogether POSTs the creation bodies from one goroutine each, released together, and
// returns the answers in request order.
func (e *env) createTogether(bodies []map[string]any) []*response {
	e.t.Helper()
	reqs := make([]request, len(bodies))
	for i, body := range bodies {
		reqs[i] = createRequest(body)
	}
	return e.DoTogether(reqs...)
}

func TestBackfillConcurrentCreatesForOneDagExactlyOneWins(t *testing.T) {
	t.Parallel()
	// The 32 creations queue on the DAG's row one after another; on a loaded machine the last
	// of them waits past the default LOCK_WAIT (2 s) and is rightly answered 503 busy (CI under
	// stress -c 4 did, through PgBouncer). What is under test is that exactly one wins and
	// every other is a 409 naming it, so the wait is scaled to the machine's load; answering
	// busy after LOCK_WAIT is lockwait_writes_test.go's claim.
	e := newEnv(t, withLockWait(patient(repo.DefaultLockWait)))
	e.PutDag("race", "@hourly", "")
	const n = 32
	bodies := make([]map[string]any, n)
	for i := range bodies {
		// Different windows, so that a winner cannot be mistaken for a replay.
		bodies[i] = backfillBody("race", day(1, 1), day(1, 2+i%5))
	}
	retriesBefore := txRetries(t, e)
	answers := e.createTogether(bodies)
	t.Logf("transaction retries during the burst: %v", txRetries(t, e)-retriesBefore)

	var winner api.Backfill
	winners, conflicts := 0, 0
	statuses := map[int]int{}
	for i, res := range answers {
		statuses[res.Status]++
		require.Less(t, res.Status, 500, "request %d: %s", i, res.Body)
		switch res.Status {
		case http.StatusCreated:
			winners++
			res.Decode(t, &winner)
		case http.StatusConflict:
			conflicts++
		}
	}
	require.Equal(t, 1, winners, "statuses: %v", statuses)
	require.Equal(t, n-1, conflicts, "statuses: %v", statuses)
	for _, res := range answers {
		if res.Status == http.StatusConflict {
			p := requireProblem(t, res, http.StatusConflict, "backfill_already_running")
			require.NotNil(t, p.ActiveBackfillId)
			require.Equal(t, winner.Id, *p.ActiveBackfillId)
		}
	}

	var ids []int64
	require.NoError(t, e.DB.Select(&ids, `SELECT id FROM backfills WHERE dag_id = 'race'`))
	require.Equal(t, []int64{winner.Id}, ids)
	var runs, slots, foreign int
	require.NoError(t, e.DB.Get(&runs, `SELECT count(*) FROM dag_runs WHERE backfill_id = $1`, winner.Id))
	require.NoError(t, e.DB.Get(&slots, `SELECT count(*) FROM backfill_dag_runs WHERE backfill_id = $1`, winner.Id))
	require.NoError(t, e.DB.Get(&foreign, `SELECT count(*) FROM dag_runs WHERE backfill_id IS DISTINCT FROM $1`, winner.Id))
	require.EqualValues(t, winner.Progress.Total, runs)
	require.EqualValues(t, winner.Progress.Total, slots)
	require.Zero(t, foreign)
	require.Equal(t, winner.Progress, e.GetBackfill(winner.Id).Progress)
	require.Equal(t, api.BackfillProgress{Total: winner.Progress.Total, Queued: winner.Progress.Total}, winner.Progress)
}

func TestBackfillConcurrentCreatesForDifferentDagsAllSucceed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 32
	bodies := make([]map[string]any, n)
	for i := range bodies {
		dag := fmt.Sprintf("par_%02d", i)
		e.PutDag(dag, "@hourly", "")
		bodies[i] = backfillBody(dag, day(1, 1), day(1, 3))
	}
	retriesBefore := txRetries(t, e)
	answers := e.createTogether(bodies)
	t.Logf("transaction retries during the burst: %v", txRetries(t, e)-retriesBefore)

	const want = 2*24 + 1
	statuses := map[int]int{}
	for i, res := range answers {
		statuses[res.Status]++
		if res.Status != http.StatusCreated {
			t.Logf("request %d (%s) answered %d: %s", i, bodies[i]["dag_id"], res.Status, res.Body)
		}
	}
	require.Equal(t, map[int]int{http.StatusCreated: n}, statuses, "answers by status; no 5xx")
	seen := map[int64]bool{}
	for i, res := range answers {
		require.Equal(t, http.StatusCreated, res.Status, "request %d: %s", i, res.Body)
		var b api.Backfill
		res.Decode(t, &b)
		require.Equal(t, fmt.Sprintf("par_%02d", i), b.DagId)
		require.Equal(t, api.BackfillProgress{Total: want, Queued: want}, b.Progress)
		require.False(t, seen[b.Id])
		seen[b.Id] = true
		var runs, slots int
		require.NoError(t, e.DB.Get(&runs, `SELECT count(*) FROM dag_runs WHERE backfill_id = $1 AND dag_id = $2`, b.Id, b.DagId))
		require.NoError(t, e.DB.Get(&slots, `SELECT count(*) FROM backfill_dag_runs WHERE backfill_id = $1`, b.Id))
		require.Equal(t, want, runs, b.DagId)
		require.Equal(t, want, slots, b.DagId)
	}
	counts := e.TableCounts()
	require.Equal(t, n, counts["backfills"])
	require.Equal(t, n*want, counts["dag_runs"])
	require.Equal(t, n*want, counts["backfill_dag_runs"])
}

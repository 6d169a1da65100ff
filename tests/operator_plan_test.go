package tests

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/repo"
	"github.com/stretchr/testify/require"
)

// opDryRun previews a creation and returns the plan with its ETag.
func opDryRun(e *env, body map[string]any) (api.DryRunCollection, string) {
	e.t.Helper()
	res := e.Do(http.MethodPost, "/api/v1/backfills/dry_run", body)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var d api.DryRunCollection
	res.Decode(e.t, &d)
	return d, res.Header.Get("ETag")
}

// opSlotsHash recomputes a backfill's plan hash from its slot listing: a skipped slot is
// "skip" with its reason, any other slot "create" (the tests that use it have no run to
// reprocess).
func opSlotsHash(e *env, dag api.Dag, id int64) string {
	e.t.Helper()
	var slots []repo.PlannedSlot
	for _, s := range e.Slots(id) {
		ps := repo.PlannedSlot{SortOrdinal: int(s.SortOrdinal), LogicalDate: s.LogicalDate, Action: repo.ActionCreate}
		if s.ExceptionReason != nil {
			ps.Action, ps.ExceptionReason = repo.ActionSkip, s.ExceptionReason
		}
		slots = append(slots, ps)
	}
	return repo.PlanHash(dag.Schedule, dag.Timezone, slots)
}

// The dry run's plan_hash (and ETag) binds a creation: the same plan creates, a changed plan
// (a new run, a new schedule) is 412 with the current hash and writes nothing; * binds nothing.
func TestPlanHashBindsCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dag := e.PutDag("plan", "@daily", "")
	body := backfillBody("plan", day(1, 1), day(1, 5))
	d, tag := opDryRun(e, body)
	require.Len(t, d.PlanHash, 64)
	require.Equal(t, `"`+d.PlanHash+`"`, tag)
	again, _ := opDryRun(e, body)
	require.Equal(t, d.PlanHash, again.PlanHash, "the same plan has the same hash")

	// A manual run for one of the dates changes the plan (create becomes skip: in flight).
	lcCreateManualRun(e, "plan", day(1, 3))
	changed, _ := opDryRun(e, body)
	require.NotEqual(t, d.PlanHash, changed.PlanHash)
	p := lcRequireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", tag), http.StatusPreconditionFailed, "plan_changed")
	require.Equal(t, changed.PlanHash, *p.CurrentPlanHash)
	var n int
	require.NoError(t, e.DB.Get(&n, `SELECT count(*) FROM backfills`))
	require.Zero(t, n, "a 412 wrote a backfill")

	// A weak or malformed tag never matches; a list matches any of its tags.
	lcRequireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", "W/"+`"`+changed.PlanHash+`"`), http.StatusPreconditionFailed, "plan_changed")
	lcRequireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", changed.PlanHash), http.StatusBadRequest, "invalid_request")
	res := e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", fmt.Sprintf(`"%s", "%s"`, d.PlanHash, changed.PlanHash))
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var b api.Backfill
	res.Decode(t, &b)
	require.Equal(t, changed.PlanHash, *b.PlanHash)
	require.Equal(t, changed.PlanHash, opSlotsHash(e, dag, b.Id))
	lcActionOK(e, b.Id, "cancel")

	// A schedule change changes the plan even when the dates would not.
	body2 := backfillBody("plan", day(2, 1), day(2, 3))
	d2, tag2 := opDryRun(e, body2)
	e.PutDag("plan", "0 0 * * *", "")
	lcRequireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body2, "If-Match", tag2), http.StatusPreconditionFailed, "plan_changed")

	// * checks nothing; the backfill still records the plan it was created from.
	current, _ := opDryRun(e, body2)
	require.NotEqual(t, d2.PlanHash, current.PlanHash)
	res = e.Do(http.MethodPost, "/api/v1/backfills", body2, "If-Match", "*")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	res.Decode(t, &b)
	require.Equal(t, current.PlanHash, *b.PlanHash)
}

// If-Match races a manual run for one of the plan's dates: the creation is 412 (the run came
// first) or 201 with exactly the previewed plan, never a backfill whose slots differ from
// the hash it carries.
func TestPlanIfMatchRacingManualRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	outcomes := map[string]int{}
	for round := range 16 {
		dagID := fmt.Sprintf("planrace_%d", round)
		dag := e.PutDag(dagID, "@daily", "")
		body := backfillBody(dagID, day(1, 1), day(1, 20))
		d, tag := opDryRun(e, body)
		var (
			wg               sync.WaitGroup
			start            = make(chan struct{})
			create, manual   *response
			createE, manualE error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			create, createE = e.do(http.MethodPost, "/api/v1/backfills", body, "If-Match", tag)
		}()
		go func() {
			defer wg.Done()
			<-start
			manual, manualE = e.do(http.MethodPost, "/api/v1/dags/"+dagID+"/runs", map[string]any{"logical_date": ts(day(1, 1+round))})
		}()
		close(start)
		wg.Wait()
		require.NoError(t, createE)
		require.NoError(t, manualE)
		outcomes[fmt.Sprintf("create=%d manual=%d", create.Status, manual.Status)]++
		switch create.Status {
		case http.StatusCreated:
			var b api.Backfill
			create.Decode(t, &b)
			require.Equal(t, d.PlanHash, *b.PlanHash)
			require.Equal(t, d.PlanHash, opSlotsHash(e, dag, b.Id), "the backfill's slots differ from the plan it claims")
			lcRequireProblem(t, manual, http.StatusConflict, "run_already_exists")
		case http.StatusPreconditionFailed:
			p := lcRequireProblem(t, create, http.StatusPreconditionFailed, "plan_changed")
			require.Equal(t, http.StatusCreated, manual.Status, "body: %s", manual.Body)
			now, _ := opDryRun(e, body)
			require.Equal(t, now.PlanHash, *p.CurrentPlanHash)
			var n int
			require.NoError(t, e.DB.Get(&n, `SELECT count(*) FROM backfills WHERE dag_id = $1`, dagID))
			require.Zero(t, n)
		default:
			t.Fatalf("create answered %d: %s", create.Status, create.Body)
		}
	}
	t.Logf("outcomes: %v", outcomes)
	lcCheckInvariants(t, e.DB)
}

package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/stretchr/testify/require"
)

// slotsHash recomputes a backfill's plan hash from its slot listing: a skipped slot is
// "skip" with its reason, any other slot "create" (the tests that use it have no run to
// reprocess).
func slotsHash(e *env, dag api.Dag, id int64) string {
	e.t.Helper()
	var slots []domain.PlannedSlot
	for _, s := range e.Slots(id) {
		ps := domain.PlannedSlot{SortOrdinal: int(s.SortOrdinal), LogicalDate: s.LogicalDate, Action: domain.ActionCreate}
		if s.ExceptionReason != nil {
			ps.Action, ps.ExceptionReason = domain.ActionSkip, s.ExceptionReason
		}
		slots = append(slots, ps)
	}
	return domain.PlanHash(dag.Schedule, dag.Timezone, slots)
}

// The dry run's plan_hash (and ETag) binds a creation: the same plan creates, a changed plan
// (a new run, a new schedule) is 412 with the current hash and writes nothing; * binds nothing.
func TestPlanHashBindsCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dag := e.PutDag("plan", "@daily", "")
	body := backfillBody("plan", day(1, 1), day(1, 5))
	d, tag := e.DryRun(body)
	require.Len(t, d.PlanHash, 64)
	require.Equal(t, `"`+d.PlanHash+`"`, tag)
	again, _ := e.DryRun(body)
	require.Equal(t, d.PlanHash, again.PlanHash, "the same plan has the same hash")

	// A manual run for one of the dates changes the plan (create becomes skip: in flight).
	e.CreateManualRun("plan", day(1, 3), nil)
	changed, _ := e.DryRun(body)
	require.NotEqual(t, d.PlanHash, changed.PlanHash)
	p := requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", tag), http.StatusPreconditionFailed, "plan_changed")
	require.Equal(t, changed.PlanHash, *p.CurrentPlanHash)
	require.Zero(t, e.Count(`SELECT count(*) FROM backfills`), "a 412 wrote a backfill")

	// A weak or malformed tag never matches; a list matches any of its tags.
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", "W/"+`"`+changed.PlanHash+`"`), http.StatusPreconditionFailed, "plan_changed")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", changed.PlanHash), http.StatusBadRequest, "invalid_request")
	res := e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", fmt.Sprintf(`"%s", "%s"`, d.PlanHash, changed.PlanHash))
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var b api.Backfill
	res.Decode(t, &b)
	require.Equal(t, changed.PlanHash, *b.PlanHash)
	require.Equal(t, changed.PlanHash, slotsHash(e, dag, b.Id))
	e.ActionOK(b.Id, "cancel")

	// A schedule change changes the plan even when the dates would not.
	body2 := backfillBody("plan", day(2, 1), day(2, 3))
	d2, tag2 := e.DryRun(body2)
	e.PutDag("plan", "0 0 * * *", "")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body2, "If-Match", tag2), http.StatusPreconditionFailed, "plan_changed")

	// * checks nothing; the backfill still records the plan it was created from.
	current, _ := e.DryRun(body2)
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
	e.raceRounds(16, "planrace", func(round int, dagID string) string {
		dag := e.PutDag(dagID, "@daily", "")
		body := backfillBody(dagID, day(1, 1), day(1, 20))
		d, tag := e.DryRun(body)
		answers := e.DoTogether(createRequest(body, "If-Match", tag), manualRunRequest(dagID, day(1, 1+round)))
		create, manual := answers[0], answers[1]
		switch create.Status {
		case http.StatusCreated:
			var b api.Backfill
			create.Decode(t, &b)
			require.Equal(t, d.PlanHash, *b.PlanHash)
			require.Equal(t, d.PlanHash, slotsHash(e, dag, b.Id), "the backfill's slots differ from the plan it claims")
			requireProblem(t, manual, http.StatusConflict, "run_already_exists")
		case http.StatusPreconditionFailed:
			p := requireProblem(t, create, http.StatusPreconditionFailed, "plan_changed")
			require.Equal(t, http.StatusCreated, manual.Status, "body: %s", manual.Body)
			now, _ := e.DryRun(body)
			require.Equal(t, now.PlanHash, *p.CurrentPlanHash)
			require.Zero(t, e.Count(`SELECT count(*) FROM backfills WHERE dag_id = $1`, dagID))
		default:
			t.Fatalf("create answered %d: %s", create.Status, create.Body)
		}
		return fmt.Sprintf("create=%d manual=%d", create.Status, manual.Status)
	})
}

package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// Dagster#26937 and #27789: backfills stayed "in progress" forever after an upstream failed.
// Here a failed run cancels every run that waits on it, transitively, in the report's own
// transaction, with a note naming it; those cancels charge no failure budget; the other slots
// go on; and the group ends failed, never hanging.
func TestGroupUpstreamFailureCancelsDependentsAndNeverHangs_Dagster26937_27789(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	e.PutDagWith("c", "@daily", "upstreams", []any{up("b")})
	g := e.CreateGroup([]string{"a"}, day(1, 1), day(1, 3), "include_downstream", "all", "max_failed_runs", 5)

	runs := e.ClaimDag("w", "a", 3)
	require.Len(t, runs, 3)
	for _, r := range runs {
		if r.LogicalDate.Equal(day(1, 2)) {
			e.ReportFailed(r, "boom")
			continue
		}
		e.Report(r, "success")
	}
	// The failed day's b and c are canceled at once, naming a's run; the others are claimable.
	for _, dag := range []string{"b", "c"} {
		run := e.GetRun(dag, "backfill__2024-01-02T00:00:00Z")
		require.Equal(t, api.DagRunStateCanceled, run.State, dag)
		require.Equal(t, "upstream_failed: a backfill__2024-01-02T00:00:00Z", str(run.Note), dag)
	}
	g = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStateRunning, g.State, "one failure of a budget of 5 does not pause it")
	require.Equal(t, int64(1), g.Progress.Failed, "only a's own failure is charged")
	require.Equal(t, int64(2), g.Progress.Canceled)
	require.Equal(t, int64(0), member(t, g, "b").Progress.Failed)

	e.workUntilIdle(4, nil)
	e.SweepOnce()
	g = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStateFailed, g.State)
	require.Equal(t, api.BackfillStateFailed, member(t, g, "a").State)
	require.Equal(t, api.BackfillStateFailed, member(t, g, "c").State, "a member with canceled runs did not succeed")
	require.Equal(t, int64(2), member(t, g, "c").Progress.Success)
}

// A group's failure budget counts failed runs across members: the run that reaches it pauses
// the group and its running members in its own transaction; unpausing the group resumes them.
func TestGroupFailureBudgetPausesEveryMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("x", "@daily", "")
	e.PutDag("y", "@daily", "")
	g := e.CreateGroup([]string{"x", "y"}, day(1, 1), day(1, 4), "max_failed_runs", 2)
	e.ReportFailed(e.ClaimDag("w", "x", 1)[0], "one")
	require.Equal(t, api.BackfillStateRunning, e.GetGroup(g.Id).State)
	e.ReportFailed(e.ClaimDag("w", "y", 1)[0], "two")
	g = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStatePaused, g.State)
	require.Equal(t, "failure_budget", string(*g.PauseReason))
	for _, m := range g.Members {
		require.Equal(t, api.BackfillStatePaused, m.State, m.DagId)
	}
	require.Empty(t, e.Claim("w", 10), "a paused group hands out nothing")
	res := e.GroupAction(g.Id, "unpause")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.Len(t, e.Claim("w", 10), 6)
}

// Airflow#72337: canceling a backfill left runs behind. A group's cancel cancels every
// member's queued runs, blocked ones included; running runs finish, then each member and the
// group end canceled.
func TestGroupCancelDrainsEveryMember_Airflow72337(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	g := e.CreateGroup([]string{"a", "b"}, day(1, 1), day(1, 5))
	running := e.ClaimDag("w", "a", 1)
	require.Len(t, running, 1)

	res := e.GroupAction(g.Id, "cancel")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	res.Decode(t, &g)
	require.Equal(t, api.BackfillStateCanceling, g.State)
	require.Equal(t, api.BackfillStateCanceling, member(t, g, "a").State, "its running run goes on")
	require.Equal(t, api.BackfillStateCanceled, member(t, g, "b").State)
	require.Equal(t, int64(0), g.Progress.Queued)
	require.Equal(t, int64(0), g.Progress.Blocked)
	for _, s := range e.Slots(member(t, g, "b").BackfillId) {
		require.Nil(t, s.Note, "a group's cancel is no upstream failure")
	}
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "cancel").Status, "canceling a canceling group changes nothing")

	e.Report(running[0], "success")
	e.SweepOnce()
	g = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStateCanceled, g.State)
	require.NotNil(t, g.CompletedAt)
	requireProblem(t, e.GroupAction(g.Id, "cancel"), http.StatusConflict, "backfill_not_active")
	requireProblem(t, e.GroupAction(g.Id, "pause"), http.StatusConflict, "backfill_not_active")
}

// A member is paused, unpaused and canceled with its group: on the member itself those are
// 409 managed_by_group, and nothing changes.
func TestGroupMemberActionsAreManagedByTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("m", "@daily", "")
	g := e.CreateGroup([]string{"m"}, day(1, 1), day(1, 2))
	id := g.Members[0].BackfillId
	require.Equal(t, g.Id, *e.GetBackfill(id).GroupId)
	for _, action := range []string{"pause", "unpause", "cancel"} {
		p := requireProblem(t, e.Action(id, action), http.StatusConflict, "managed_by_group", action)
		require.Contains(t, p.Detail, "group")
	}
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(id).State)

	res := e.GroupAction(g.Id, "pause")
	require.Equal(t, http.StatusOK, res.Status)
	res.Decode(t, &g)
	require.Equal(t, api.BackfillStatePaused, g.State)
	require.Equal(t, api.BackfillStatePaused, e.GetBackfill(id).State)
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "pause").Status, "pausing a paused group changes nothing")
	res = e.GroupAction(g.Id, "unpause")
	res.Decode(t, &g)
	require.Equal(t, api.BackfillStateRunning, g.State)
	require.Equal(t, api.BackfillStateRunning, e.GetBackfill(id).State)
	requireProblem(t, e.GroupAction(99999, "pause"), http.StatusNotFound, "backfill_group_not_found")
	requireProblem(t, e.Do(http.MethodGet, groupPath(99999), nil), http.StatusNotFound, "backfill_group_not_found")
}

// A 409 lists every member DAG with an active backfill, and nothing is written: no group, no
// member, no run.
func TestGroupConflictsAreAllListedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("p", "@daily", "")
	e.PutDagWith("q", "@daily", "upstreams", []any{up("p")})
	e.PutDagWith("r", "@daily", "upstreams", []any{up("q")})
	bp := e.CreateBackfill(backfillBody("p", day(2, 1), day(2, 2)))
	br := e.CreateBackfill(backfillBody("r", day(2, 1), day(2, 2)))
	before := e.TableCounts()
	res := e.Do(http.MethodPost, groupsPath, map[string]any{"dag_ids": []string{"p"}, "include_downstream": "all",
		"from_date": ts(day(1, 1)), "to_date": ts(day(1, 3))})
	p := requireProblem(t, res, http.StatusConflict, "backfill_already_running")
	require.Equal(t, []api.GroupConflict{{DagId: "p", ActiveBackfillId: bp.Id}, {DagId: "r", ActiveBackfillId: br.Id}}, *p.Conflicts)
	require.Equal(t, bp.Id, *p.ActiveBackfillId)
	require.Equal(t, before, e.TableCounts(), "nothing written")

	// The dry run is never 409.
	res = e.Do(http.MethodPost, groupsPath+"/dry_run", map[string]any{"dag_ids": []string{"p"}, "include_downstream": "all",
		"from_date": ts(day(1, 1)), "to_date": ts(day(1, 3))})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.Equal(t, before, e.TableCounts())
}

// Unknown targets are 404; a window of no slot, 422; over MAX_RUN_DEPENDENCIES, 422 with the
// count; a malformed body, 400. None writes anything.
func TestGroupRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("s", "@daily", "")
	e.PutDagWith("t", "@daily", "upstreams", []any{up("s", "mapping", "all")})
	before := e.TableCounts()
	body := func(extra ...any) map[string]any {
		return fields(map[string]any{"dag_ids": []string{"s", "t"}, "from_date": ts(day(1, 1)), "to_date": ts(day(1, 3))}, extra...)
	}
	requireProblem(t, e.Do(http.MethodPost, groupsPath, body("dag_ids", []string{"s", "nope"})), http.StatusNotFound, "dag_not_found")
	requireProblem(t, e.Do(http.MethodPost, groupsPath, body("from_date", "2090-01-01T00:00:00Z", "to_date", "2090-01-02T00:00:00Z")),
		http.StatusUnprocessableEntity, "invalid_backfill")
	requireProblem(t, e.Do(http.MethodPost, groupsPath, body("dag_ids", []string{})), http.StatusBadRequest, "invalid_request")
	requireProblem(t, e.Do(http.MethodPost, groupsPath, body("include_downstream", "some")), http.StatusBadRequest, "invalid_request")
	requireProblem(t, e.Do(http.MethodPost, groupsPath, body("priority", 11)), http.StatusUnprocessableEntity, "invalid_priority")
	require.Equal(t, before, e.TableCounts())

	// 3 × 3 = 9 dependencies with "all" against a cap of 5.
	small := newEnv(t, withMaxRunDependencies(5))
	small.PutDag("s", "@daily", "")
	small.PutDagWith("t", "@daily", "upstreams", []any{up("s", "mapping", "all")})
	p := requireProblem(t, small.Do(http.MethodPost, groupsPath, body()), http.StatusUnprocessableEntity, "too_many_dependencies")
	require.Equal(t, int64(9), *p.Dependencies)
	require.Equal(t, int64(5), *p.MaxRunDependencies)
	require.Zero(t, small.Count(`SELECT count(*) FROM backfill_groups`))
}

// Events: a group's changes write backfill_group.* events carrying the group; its members'
// events carry group_id.
func TestGroupEventsCarryTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ev", "@daily", "")
	g := e.CreateGroup([]string{"ev"}, day(1, 1), day(1, 2))
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "pause").Status)
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "cancel").Status)
	e.SweepOnce()

	var page api.EventCollection
	e.Do(http.MethodGet, "/api/v1/events?limit=100", nil).Decode(t, &page)
	var groupTypes []string
	for _, ev := range page.Events {
		if strings.HasPrefix(string(ev.Type), "backfill_group.") {
			groupTypes = append(groupTypes, string(ev.Type))
			require.Equal(t, g.Id, *ev.GroupId)
			require.Nil(t, ev.BackfillId)
			require.NotNil(t, ev.Data.Group)
			require.Equal(t, g.Id, ev.Data.Group.Id)
			require.Len(t, ev.Data.Group.Members, 1)
			continue
		}
		require.Equal(t, g.Id, *ev.GroupId, "a member's event carries its group")
		require.Equal(t, g.Id, *ev.Data.Backfill.GroupId)
	}
	require.Equal(t, []string{"backfill_group.created", "backfill_group.paused", "backfill_group.canceling",
		"backfill_group.canceled"}[:2], groupTypes[:2])
	require.Contains(t, groupTypes, "backfill_group.canceled")
}

// A group's PATCH changes its settings and every active member's in one transaction: the next
// claim ranks the members by the new priority. Out-of-range priority is 422; a terminal
// group is 409.
func TestGroupPatchChangesEveryMemberLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("lo", "@daily", "")
	e.PutDag("other", "@daily", "")
	g := e.CreateGroup([]string{"lo"}, day(1, 1), day(1, 3), "priority", -5)
	e.CreateBackfill(backfillBody("other", day(1, 1), day(1, 3)))
	require.Equal(t, "other", e.ClaimN(1, "w", 1)[0].DagId, "priority 0 before -5")

	res := e.Do(http.MethodPatch, groupPath(g.Id), map[string]any{"priority": 7, "max_active_runs": 2, "description": "urgent"})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	res.Decode(t, &g)
	require.Equal(t, int32(7), g.Priority)
	require.Equal(t, int32(2), g.MaxActiveRuns)
	m := e.GetBackfill(g.Members[0].BackfillId)
	require.Equal(t, int32(7), m.Priority)
	require.Equal(t, int32(2), m.MaxActiveRuns)
	require.Equal(t, "urgent", str(m.Description))
	got := e.ClaimN(4, "w", 5)
	require.Equal(t, []string{"lo", "lo", "other", "other"}, []string{got[0].DagId, got[1].DagId, got[2].DagId, got[3].DagId},
		"priority 7 first, up to its new max_active_runs")

	requireProblem(t, e.Do(http.MethodPatch, groupPath(g.Id), map[string]any{"priority": 11}), http.StatusUnprocessableEntity, "invalid_priority")
	requireProblem(t, e.Do(http.MethodPatch, groupPath(g.Id), map[string]any{"max_active_runs": nil}), http.StatusBadRequest, "invalid_request")
	require.Equal(t, http.StatusOK, e.GroupAction(g.Id, "cancel").Status)
	for _, r := range got {
		e.Report(r, "success")
	}
	e.SweepOnce()
	requireProblem(t, e.Do(http.MethodPatch, groupPath(g.Id), map[string]any{"priority": 1}), http.StatusConflict, "backfill_not_active")
}

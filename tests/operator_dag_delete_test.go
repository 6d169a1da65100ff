package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// leftOf counts what is left of a DAG in every table that can refer to it.
func leftOf(t testing.TB, e *env, dagID string) int {
	t.Helper()
	var n int
	require.NoError(t, e.DB.Get(&n, `
		SELECT (SELECT count(*) FROM dags WHERE dag_id = $1)
		     + (SELECT count(*) FROM dag_runs WHERE dag_id = $1)
		     + (SELECT count(*) FROM backfills WHERE dag_id = $1)
		     + (SELECT count(*) FROM backfill_dag_runs s WHERE NOT EXISTS (SELECT 1 FROM backfills b WHERE b.id = s.backfill_id))
		     + (SELECT count(*) FROM idempotency_keys k WHERE k.dag_id = $1)
		     + (SELECT count(*) FROM idempotency_keys k WHERE k.operation = 'backfill'
		            AND NOT EXISTS (SELECT 1 FROM backfills b WHERE b.id = k.result_ids[1]))`, dagID))
	return n
}

// DELETE removes the DAG with its runs and backfill history; 409 while a backfill is active
// or a run outside backfills is queued or running; 404 for an unknown DAG.
func TestDagDeleteRemovesHistoryAndRefusesWhileBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("del", "@daily", "")
	requireProblem(t, e.Do(http.MethodDelete, "/api/v1/dags/nope", nil), http.StatusNotFound, "dag_not_found")

	b := e.CreateBackfill(backfillBody("del", day(1, 1), day(1, 3)))
	p := requireProblem(t, e.Do(http.MethodDelete, "/api/v1/dags/del", nil), http.StatusConflict, "backfill_already_running")
	require.Equal(t, b.Id, *p.ActiveBackfillId)
	e.ActionOK(b.Id, "cancel")

	manual := e.CreateManualRun("del", day(3, 1), nil)
	requireProblem(t, e.Do(http.MethodDelete, "/api/v1/dags/del", nil), http.StatusConflict, "runs_in_flight")
	claimed := e.ClaimDag("w", "del", 1)
	require.Len(t, claimed, 1)
	require.Equal(t, manual.Id, claimed[0].Id)
	requireProblem(t, e.Do(http.MethodDelete, "/api/v1/dags/del", nil), http.StatusConflict, "runs_in_flight")
	e.Report(claimed[0], "success")

	// An idempotent creation of the DAG's history goes with it.
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("del", day(2, 1), day(2, 2)), "Idempotency-Key", "del-key")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var b2 struct{ Id int64 }
	res.Decode(t, &b2)
	e.ActionOK(b2.Id, "cancel")

	res = e.Do(http.MethodDelete, "/api/v1/dags/del", nil)
	require.Equal(t, http.StatusNoContent, res.Status, "body: %s", res.Body)
	require.Empty(t, res.Body)
	require.Zero(t, leftOf(t, e, "del"))
	requireProblem(t, e.Do(http.MethodGet, "/api/v1/dags/del", nil), http.StatusNotFound, "dag_not_found")
	requireProblem(t, e.Do(http.MethodGet, backfillPath(b.Id), nil), http.StatusNotFound, "backfill_not_found")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("del", day(2, 1), day(2, 2)), "Idempotency-Key", "del-key"),
		http.StatusNotFound, "dag_not_found")
	requireProblem(t, e.Do(http.MethodDelete, "/api/v1/dags/del", nil), http.StatusNotFound, "dag_not_found")

	// The id can be used again, from scratch.
	e.PutDag("del", "@daily", "")
	require.EqualValues(t, 3, e.CreateBackfill(backfillBody("del", day(1, 1), day(1, 3))).Progress.Queued)
	checkInvariants(t, e.DB)
}

// DELETE races a backfill creation, and a manual run, for the same DAG: either the addition
// commits first and the delete answers 409, or the delete wins and the addition answers 404;
// nothing of the DAG survives a delete.
func TestDagDeleteRacingCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.raceRounds(12, "delrace", func(round int, dagID string) string {
		e.PutDag(dagID, "@hourly", "")
		manual := round%3 == 2
		addReq := createRequest(backfillBody(dagID, day(1, 1), day(1, 10)))
		if manual {
			addReq = manualRunRequest(dagID, day(5, 1))
		}
		answers := e.DoTogether(request{Method: http.MethodDelete, Path: "/api/v1/dags/" + dagID}, addReq)
		del, add := answers[0], answers[1]
		switch {
		case del.Status == http.StatusNoContent:
			requireProblem(t, add, http.StatusNotFound, "dag_not_found")
			require.Zero(t, leftOf(t, e, dagID), "something of %s survived its delete", dagID)
		case manual:
			requireProblem(t, del, http.StatusConflict, "runs_in_flight")
			require.Equal(t, http.StatusCreated, add.Status, "body: %s", add.Body)
		default:
			requireProblem(t, del, http.StatusConflict, "backfill_already_running")
			require.Equal(t, http.StatusCreated, add.Status, "body: %s", add.Body)
		}
		return fmt.Sprintf("manual=%v delete=%d add=%d", manual, del.Status, add.Status)
	})
}

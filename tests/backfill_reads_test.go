package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func TestBackfillGetUnknownIsBackfillNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/api/v1/backfills/1", "/api/v1/backfills/999999", "/api/v1/backfills/9223372036854775807"} {
		res := e.Do(http.MethodGet, path, nil)
		requireProblem(t, res, http.StatusNotFound, "backfill_not_found")
		res = e.Do(http.MethodGet, path+"/dag_runs", nil)
		requireProblem(t, res, http.StatusNotFound, "backfill_not_found")
	}
}

// readsFixture makes four backfills, in id order:
//
//	A1 (dag a) succeeded, A2 (dag a) running, B1 (dag b) running, C1 (dag c) canceled.
func readsFixture(t testing.TB, e *env) (a1, a2, b1, c1 api.Backfill) {
	t.Helper()
	for _, d := range []string{"a", "b", "c"} {
		e.PutDag(d, "@daily", "")
	}
	a1 = e.CreateBackfill(backfillBody("a", day(1, 1), day(1, 2)))
	for _, r := range e.Claim("w", 10) {
		e.Report(r, "success")
	}
	e.SweepOnce()
	a1 = e.GetBackfill(a1.Id)
	require.Equal(t, api.BackfillState("succeeded"), a1.State)
	a2 = e.CreateBackfill(backfillBody("a", day(1, 3), day(1, 4)))
	b1 = e.CreateBackfill(backfillBody("b", day(1, 1), day(1, 3)))
	c1 = e.CreateBackfill(backfillBody("c", day(1, 1), day(1, 3)))
	res := e.Do(http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/cancel", c1.Id), nil)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	c1 = e.GetBackfill(c1.Id)
	require.Equal(t, api.BackfillState("canceled"), c1.State)
	return a1, a2, b1, c1
}

func TestBackfillListFiltersOrderAndPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a1, a2, b1, c1 := readsFixture(t, e)
	list := func(query string) ([]int64, int64) {
		t.Helper()
		c := call[api.BackfillCollection](e, http.StatusOK, http.MethodGet, "/api/v1/backfills"+query, nil)
		require.NotNil(t, c.Backfills)
		ids := make([]int64, 0, len(c.Backfills))
		for _, b := range c.Backfills {
			ids = append(ids, b.Id)
		}
		return ids, c.TotalEntries
	}
	cases := []struct {
		query string
		ids   []int64
		total int64
	}{
		{"", []int64{a1.Id, a2.Id, b1.Id, c1.Id}, 4},
		{"?order_by=id", []int64{a1.Id, a2.Id, b1.Id, c1.Id}, 4},
		{"?order_by=-id", []int64{c1.Id, b1.Id, a2.Id, a1.Id}, 4},
		{"?dag_id=a", []int64{a1.Id, a2.Id}, 2},
		{"?dag_id=zzz", []int64{}, 0},
		{"?state=running", []int64{a2.Id, b1.Id}, 2},
		{"?state=succeeded", []int64{a1.Id}, 1},
		{"?state=canceled", []int64{c1.Id}, 1},
		{"?state=paused", []int64{}, 0},
		{"?active=true", []int64{a2.Id, b1.Id}, 2},
		{"?active=false", []int64{a1.Id, c1.Id}, 2},
		{"?dag_id=a&active=true", []int64{a2.Id}, 1},
		{"?dag_id=a&active=false&state=succeeded", []int64{a1.Id}, 1},
		{"?dag_id=a&state=canceled", []int64{}, 0},
		{"?limit=2", []int64{a1.Id, a2.Id}, 4},
		{"?limit=2&offset=1", []int64{a2.Id, b1.Id}, 4},
		{"?limit=2&offset=3", []int64{c1.Id}, 4},
		{"?offset=4", []int64{}, 4},
		{"?order_by=-id&limit=1&offset=1", []int64{b1.Id}, 4},
		{"?active=true&order_by=-id&limit=1", []int64{b1.Id}, 2},
		{"?limit=1000", []int64{a1.Id, a2.Id, b1.Id, c1.Id}, 4},
	}
	for _, c := range cases {
		ids, total := list(c.query)
		require.Equal(t, c.ids, ids, c.query)
		require.Equal(t, c.total, total, c.query)
	}

	// Listed backfills are the same as read one by one.
	res := e.Do(http.MethodGet, "/api/v1/backfills?order_by=id", nil)
	var all api.BackfillCollection
	res.Decode(t, &all)
	for _, b := range all.Backfills {
		require.Equal(t, e.GetBackfill(b.Id), b)
		require.Equal(t, b.State == "paused", b.IsPaused)
		terminal := b.State == "succeeded" || b.State == "failed" || b.State == "canceled"
		require.Equal(t, terminal, b.CompletedAt != nil, "completed_at is set exactly when terminal")
		p := b.Progress
		require.Equal(t, p.Total, p.Queued+p.Running+p.Success+p.Failed+p.Canceled+p.Skipped)
	}
	require.Equal(t, api.BackfillProgress{Total: 3, Canceled: 3}, e.GetBackfill(c1.Id).Progress)
}

func TestBackfillListAndSlotsRejectOutOfRangePaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("pg", day(1, 1), day(1, 3))
	for _, base := range []string{"/api/v1/backfills", fmt.Sprintf("/api/v1/backfills/%d/dag_runs", b.Id), "/api/v1/dags", "/api/v1/dags/pg/runs"} {
		for _, q := range []string{"limit=0", "limit=1001", "limit=-1", "offset=-1", "limit=abc", "offset=1.5"} {
			res := e.Do(http.MethodGet, base+"?"+q, nil)
			p := requireProblem(t, res, http.StatusBadRequest, "invalid_request")
			require.NotEmpty(t, p.Detail, base+"?"+q)
		}
	}
	for _, q := range []string{"order_by=name", "order_by=-created_at", "state=done", "active=maybe", "dag_id=bad%20id"} {
		res := e.Do(http.MethodGet, "/api/v1/backfills?"+q, nil)
		requireProblem(t, res, http.StatusBadRequest, "invalid_request")
	}
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/dag_runs?order_by=logical_date", b.Id), nil)
	requireProblem(t, res, http.StatusBadRequest, "invalid_request")
}

func TestBackfillSlotsListingOrderAndPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("sl", "@daily", "")
	// The 3rd has a run already, so one slot is skipped.
	e.CreateManualRun("sl", day(1, 3), nil)
	b := e.CreateBackfill(backfillBody("sl", day(1, 1), day(1, 7)))
	require.Equal(t, api.BackfillProgress{Total: 7, Queued: 6, Skipped: 1}, b.Progress)
	page := func(query string) ([]int32, int64) {
		t.Helper()
		c := call[api.BackfillDagRunCollection](e, http.StatusOK, http.MethodGet, backfillPath(b.Id)+"/dag_runs"+query, nil)
		require.NotNil(t, c.BackfillDagRuns)
		ords := make([]int32, 0, len(c.BackfillDagRuns))
		for _, s := range c.BackfillDagRuns {
			ords = append(ords, s.SortOrdinal)
			require.Equal(t, day(1, int(s.SortOrdinal)), s.LogicalDate)
		}
		return ords, c.TotalEntries
	}
	cases := []struct {
		query string
		ords  []int32
	}{
		{"", []int32{1, 2, 3, 4, 5, 6, 7}},
		{"?order_by=sort_ordinal", []int32{1, 2, 3, 4, 5, 6, 7}},
		{"?order_by=-sort_ordinal", []int32{7, 6, 5, 4, 3, 2, 1}},
		{"?limit=3", []int32{1, 2, 3}},
		{"?limit=3&offset=3", []int32{4, 5, 6}},
		{"?limit=3&offset=6", []int32{7}},
		{"?offset=7", []int32{}},
		{"?order_by=-sort_ordinal&limit=2&offset=1", []int32{6, 5}},
	}
	for _, c := range cases {
		ords, total := page(c.query)
		require.Equal(t, c.ords, ords, c.query)
		require.EqualValues(t, 7, total, "total_entries counts every slot: %s", c.query)
	}
	slots := e.Slots(b.Id)
	require.Nil(t, slots[2].DagRunId)
	require.Nil(t, slots[2].RunId)
	require.Nil(t, slots[2].State)
	require.Equal(t, "in flight", str(slots[2].ExceptionReason))
	for i, sl := range slots {
		if i == 2 {
			continue
		}
		require.NotNil(t, sl.DagRunId)
		require.Nil(t, sl.ExceptionReason)
	}
	// A slot's state follows its run.
	claimed := e.ClaimN(1, "w", 1)
	require.Equal(t, day(1, 3), claimed[0].LogicalDate, "the manual run outside backfills is claimed first")
	claimed = e.ClaimN(2, "w", 2)
	e.Report(claimed[0], "success")
	slots = e.Slots(b.Id)
	require.Equal(t, api.DagRunState("success"), *slots[0].State)
	require.Equal(t, api.DagRunState("running"), *slots[1].State)
	require.Equal(t, api.DagRunState("queued"), *slots[3].State)
	require.Equal(t, api.BackfillProgress{Total: 7, Queued: 4, Running: 1, Success: 1, Skipped: 1}, e.GetBackfill(b.Id).Progress)
}

package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The writes made in one statement of their own (a DAG's and a pool's PUT, a backfill's PATCH
// and pause, a webhook's DELETE) wait at most LOCK_WAIT for a row that another transaction
// holds, then answer 503 busy with Retry-After, nothing written, as transactions do. Without
// the bound they waited for as long as the holder liked, holding a connection and an
// admission slot (CI, 2026-12-04: a PUT of a DAG, 7 minutes). Once the hold ends, each
// succeeds.
func TestOneStatementWritesOfAHeldRowAnswerBusyAfterLockWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lockWait = 500 * time.Millisecond
	adm, _ := productionShape(t, e, lockWait)
	b := adm.DailyBackfill("held_rows", day(1, 1), day(1, 3))
	adm.PutPool("held_pool", 3, http.StatusCreated)
	hook := adm.createWebhook("https://example.com/held", "backfill.paused")

	hold := e.hold(
		`SELECT 1 FROM dags WHERE dag_id = 'held_rows' FOR UPDATE`,
		fmt.Sprintf(`SELECT 1 FROM backfills WHERE id = %d FOR UPDATE`, b.Id),
		`SELECT 1 FROM pools WHERE name = 'held_pool' FOR UPDATE`,
		fmt.Sprintf(`SELECT 1 FROM webhooks WHERE id = %d FOR UPDATE`, hook.Id),
	)

	writes := []struct {
		method, path string
		body         any
		ok           int
	}{
		{http.MethodPut, "/api/v1/dags/held_rows", map[string]any{"schedule": "@hourly"}, http.StatusOK},
		{http.MethodPatch, fmt.Sprintf("/api/v1/backfills/%d", b.Id), map[string]any{"max_active_runs": 7}, http.StatusOK},
		{http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/pause", b.Id), nil, http.StatusOK},
		{http.MethodPut, poolPath("held_pool"), map[string]any{"slots": 9}, http.StatusOK},
		{http.MethodDelete, fmt.Sprintf("/api/v1/webhooks/%d", hook.Id), nil, http.StatusNoContent},
	}
	for _, w := range writes {
		start := time.Now()
		res := adm.Do(w.method, w.path, w.body)
		took := time.Since(start)
		p := requireProblem(t, res, http.StatusServiceUnavailable, "busy", w.method, " ", w.path)
		require.Equal(t, "waited LOCK_WAIT for a row another request holds; nothing was written", p.Detail)
		require.NotEmpty(t, res.Header.Get("Retry-After"))
		// LOCK_WAIT is shared among attempts (repo.lockBudget): the last share is under 20 ms.
		require.GreaterOrEqual(t, took, lockWait-lockBudgetSlack, "%s %s answered before LOCK_WAIT", w.method, w.path)
		// A generous bound: it came back instead of waiting for the holder.
		require.Less(t, took, lockWait+10*time.Second)
	}
	require.NoError(t, hold.Rollback())

	// Nothing was written.
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM dags WHERE dag_id = 'held_rows' AND schedule = '@daily'`))
	got := adm.GetBackfill(b.Id)
	require.EqualValues(t, "running", got.State)
	require.NotEqual(t, 7, got.MaxActiveRuns)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM pools WHERE name = 'held_pool' AND slots = 3`))
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhooks WHERE id = $1 AND deleted_at IS NULL`, hook.Id))

	for _, w := range writes {
		res := adm.Do(w.method, w.path, w.body)
		require.Equal(t, w.ok, res.Status, "%s %s: %s", w.method, w.path, res.Body)
	}
}

// lockBudgetSlack is how much of LOCK_WAIT a request may leave unused: repo.lockBudget gives
// each attempt half of what is left, and answers once that half is under 10 ms.
const lockBudgetSlack = 25 * time.Millisecond

// Requests queued on one held row each wait at most LOCK_WAIT in all. PostgreSQL's
// lock_timeout bounds each wait on its own, and a statement queued behind another waiter waits
// twice, for the tuple lock the waiter ahead holds and then for the holder: with the whole
// LOCK_WAIT as lock_timeout, the second of these PATCHes answered after nearly 2 × LOCK_WAIT
// (an audit: 3.9 s with LOCK_WAIT 2 s).
func TestWritesQueuedOnAHeldRowWaitAtMostLockWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		lockWait = time.Second
		queued   = 4
		apart    = 150 * time.Millisecond
	)
	adm, _ := productionShape(t, e, lockWait)
	b := adm.DailyBackfill("held_queue", day(1, 1), day(1, 3))

	ctx := context.Background()
	hold, err := e.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	var held int
	require.NoError(t, hold.GetContext(ctx, &held, `SELECT count(*) FROM (SELECT 1 FROM backfills WHERE id = $1 FOR UPDATE) AS locked`, b.Id))
	require.Equal(t, 1, held)

	took := make([]time.Duration, queued)
	releaseTogether(t, queued, func(i int) error {
		time.Sleep(time.Duration(i) * apart) // each joins the queue behind the one before
		start := time.Now()
		res, err := adm.do(http.MethodPatch, backfillPath(b.Id), map[string]any{"max_active_runs": 20 + i})
		took[i] = time.Since(start)
		if err != nil {
			return err
		}
		if res.Status != http.StatusServiceUnavailable {
			return fmt.Errorf("PATCH %d after %v: %d %s", i, took[i], res.Status, res.Body)
		}
		return nil
	})
	t.Logf("waits: %v", took)
	for i, d := range took {
		require.GreaterOrEqual(t, d, lockWait-lockBudgetSlack, "PATCH %d answered before LOCK_WAIT", i)
		// Scheduling slack on a busy machine; twice LOCK_WAIT would be 2 s.
		require.Less(t, d, lockWait+400*time.Millisecond, "PATCH %d waited past LOCK_WAIT", i)
	}
	require.NoError(t, hold.Rollback())
	require.Equal(t, 0, e.Count(`SELECT count(*) FROM events WHERE backfill_id = $1 AND type = 'backfill.updated'`, b.Id),
		"nothing was written")
}

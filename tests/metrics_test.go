package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetricsShowActiveBackfillsAndUnfinishedRunsByState checks the operator's gauges
// against a known state: one running and one paused backfill, claims, and a manual run.
func TestMetricsShowActiveBackfillsAndUnfinishedRunsByState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.DailyBackfill("gauge_a", day(1, 1), day(1, 5))
	e.DailyBackfill("gauge_b", day(1, 1), day(1, 3))
	require.Len(t, e.Claim("w", 2), 2)
	res := e.Do(http.MethodPost, "/api/v1/dags/gauge_b/runs", map[string]any{"logical_date": ts(day(2, 1))})
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	res = e.Do(http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/pause", a.Id), nil)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)

	body := string(e.Do(http.MethodGet, "/metrics", nil).Body)
	require.Contains(t, body, `backfill_backfills_active{state="running"} 1`)
	require.Contains(t, body, `backfill_backfills_active{state="paused"} 1`)
	require.Contains(t, body, `backfill_backfills_active{state="canceling"} 0`)
	// 5 + 3 backfill runs, 2 of them claimed, plus one manual run queued.
	require.Contains(t, body, `backfill_runs_unfinished{state="running"} 2`)
	require.Contains(t, body, `backfill_runs_unfinished{state="queued"} 7`)
}

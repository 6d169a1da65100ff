package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func slotDays(t *testing.T, slots []api.BackfillDagRun) []int {
	t.Helper()
	out := make([]int, len(slots))
	for i, s := range slots {
		out[i] = s.LogicalDate.Day()
	}
	return out
}

// logical_dates makes a backfill of exactly those slots: the dry run shows them, If-Match
// binds them, and a date that is not a slot of the window is 422 naming it, with nothing written.
func TestLogicalDatesCreateExactlyThoseSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("chosen", "@daily", "")
	chosen := []string{ts(day(1, 17)), ts(day(1, 3)), ts(day(1, 9)), ts(day(1, 3))}
	body := backfillBody("chosen", day(1, 1), day(1, 31), "logical_dates", chosen, "run_backwards", true)

	d, etag := e.DryRun(body)
	require.EqualValues(t, 3, d.TotalEntries)
	var dry []int
	for _, r := range d.Runs {
		dry = append(dry, r.LogicalDate.Day())
	}
	require.Equal(t, []int{17, 9, 3}, dry, "exactly the chosen slots, backwards, a repeat once")
	all, _ := e.DryRun(backfillBody("chosen", day(1, 1), day(1, 31), "run_backwards", true))
	require.NotEqual(t, all.PlanHash, d.PlanHash, "the plan hash covers the chosen dates")

	// Bound to the whole window's plan, the chosen dates are another plan.
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", body, "If-Match", `"`+all.PlanHash+`"`),
		http.StatusPreconditionFailed, "plan_changed")
	before := e.TableCounts()
	for _, bad := range []string{"2024-01-05T12:00:00Z", "2024-02-01T00:00:00Z", "2023-12-31T00:00:00Z"} {
		p := requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills",
			backfillBody("chosen", day(1, 1), day(1, 31), "logical_dates", []string{ts(day(1, 2)), bad})),
			http.StatusUnprocessableEntity, "invalid_logical_dates")
		require.Contains(t, p.Detail, bad)
		require.NotNil(t, p.LogicalDates)
		want, err := time.Parse(time.RFC3339, bad)
		require.NoError(t, err)
		require.Len(t, *p.LogicalDates, 1)
		require.True(t, want.Equal((*p.LogicalDates)[0]), "names %s", bad)
		requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills/dry_run",
			backfillBody("chosen", day(1, 1), day(1, 31), "logical_dates", []string{bad})),
			http.StatusUnprocessableEntity, "invalid_logical_dates")
	}
	require.Equal(t, before, e.TableCounts(), "a refused request writes nothing")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills",
		backfillBody("chosen", day(1, 1), day(1, 31), "logical_dates", []string{})), http.StatusBadRequest, "invalid_request")

	b := call[api.Backfill](e, http.StatusCreated, http.MethodPost, "/api/v1/backfills", body, "If-Match", etag)
	require.Equal(t, d.PlanHash, *b.PlanHash)
	require.EqualValues(t, 3, b.Progress.Total)
	require.Equal(t, []int{17, 9, 3}, slotDays(t, e.Slots(b.Id)))
	checkInvariants(t, e.DB)
}

// A retry with logical_dates retries exactly those slots of the parent's window.
func TestLogicalDatesRetryExactlyThoseSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("chosen_retry", "@daily", "")
	parent := finishWithFailures(e, "chosen_retry", 6, map[int]bool{2: true, 4: true, 5: true}, nil)
	require.Equal(t, api.BackfillStateFailed, parent.State)

	p := requireProblem(t, e.Do(http.MethodPost, retryPath(parent.Id), map[string]any{"logical_dates": []string{ts(day(1, 2)), ts(day(1, 9))}}),
		http.StatusUnprocessableEntity, "invalid_logical_dates")
	require.Contains(t, p.Detail, ts(day(1, 9)), "outside the parent's window")

	child := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(parent.Id),
		map[string]any{"logical_dates": []string{ts(day(1, 5)), ts(day(1, 2))}})
	require.Equal(t, []int{2, 5}, slotDays(t, e.Slots(child.Id)), "day 4 failed too, but was not chosen")
	runs := e.ClaimDag("w", "chosen_retry", 5)
	require.Len(t, runs, 2)
	checkInvariants(t, e.DB)
}

package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// too_many_runs says how many slots the window holds and what the cap is, in detail and as
// the problem's members, on the create and on the dry run.
func TestTooManyRunsSaysTheWindowsSlotsAndTheCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxBackfillRuns(100))
	e.PutDag("cap_says", "@hourly", "")
	from := day(1, 1)
	body := backfillBody("cap_says", from, from.Add(149*time.Hour))
	for _, path := range []string{"/api/v1/backfills", "/api/v1/backfills/dry_run"} {
		p := requireProblem(t, e.Do(http.MethodPost, path, body), http.StatusUnprocessableEntity, "too_many_runs", path)
		require.Contains(t, p.Detail, "150 slots", path)
		require.Contains(t, p.Detail, "at most 100 (MAX_BACKFILL_RUNS)", path)
		require.NotNil(t, p.Slots, path)
		require.EqualValues(t, 150, *p.Slots, path)
		require.NotNil(t, p.MaxBackfillRuns, path)
		require.EqualValues(t, 100, *p.MaxBackfillRuns, path)
	}
}

// An unknown time zone is 422 invalid_dag naming the nearest real zone.
func TestUnknownTimezoneSuggestsTheNearestName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodPut, "/api/v1/dags/tz_typo", map[string]any{"schedule": "@daily", "timezone": "Europe/Berln"})
	p := requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_dag")
	require.Contains(t, p.Detail, `did you mean "Europe/Berlin"?`)
}

// An unsupported schedule descriptor is 422 invalid_dag listing the supported ones.
func TestUnsupportedDescriptorListsTheSupportedOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodPut, "/api/v1/dags/every", map[string]any{"schedule": "@every 5m"})
	p := requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_dag")
	require.Contains(t, p.Detail, "@hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually")
	require.Contains(t, p.Detail, `"*/5 * * * *"`)
}

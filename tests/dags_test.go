package tests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

func TestDagPutCreatesWithDefaultsThenReplacesWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	res := e.Do(http.MethodPut, "/api/v1/dags/sales_daily", map[string]any{"schedule": "@daily"})
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, "/api/v1/dags/sales_daily", res.Header.Get("Location"))
	var created api.Dag
	res.Decode(t, &created)
	require.Equal(t, "sales_daily", created.DagId)
	require.Equal(t, "@daily", created.Schedule)
	require.Equal(t, "UTC", created.Timezone)
	require.EqualValues(t, 16, created.MaxActiveRuns)
	require.False(t, created.IsPaused)
	require.Nil(t, created.Description)
	require.Equal(t, e.Clock.Now(), created.CreatedAt)
	require.Equal(t, created.CreatedAt, created.UpdatedAt)
	require.Equal(t, time.UTC, created.CreatedAt.Location())

	// A replacement with every field set.
	e.Clock.Advance(time.Minute)
	desc := "nightly"
	res = e.Do(http.MethodPut, "/api/v1/dags/sales_daily", map[string]any{
		"schedule": "0 2 * * *", "timezone": "Europe/Amsterdam", "max_active_runs": 3,
		"is_paused": true, "description": desc,
	})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.Empty(t, res.Header.Get("Location"), "Location only comes with 201")
	var replaced api.Dag
	res.Decode(t, &replaced)
	require.Equal(t, "0 2 * * *", replaced.Schedule)
	require.Equal(t, "Europe/Amsterdam", replaced.Timezone)
	require.EqualValues(t, 3, replaced.MaxActiveRuns)
	require.True(t, replaced.IsPaused)
	require.NotNil(t, replaced.Description)
	require.Equal(t, desc, *replaced.Description)
	require.Equal(t, created.CreatedAt, replaced.CreatedAt, "created_at survives a replacement")
	require.Equal(t, e.Clock.Now(), replaced.UpdatedAt)

	// Replaced whole: the fields left out take their defaults again.
	again := call[api.Dag](e, http.StatusOK, http.MethodPut, "/api/v1/dags/sales_daily", map[string]any{"schedule": "@hourly"})
	require.Equal(t, "@hourly", again.Schedule)
	require.Equal(t, "UTC", again.Timezone)
	require.EqualValues(t, 16, again.MaxActiveRuns)
	require.False(t, again.IsPaused)
	require.Nil(t, again.Description)

	// GET answers what the last PUT stored.
	got := call[api.Dag](e, http.StatusOK, http.MethodGet, "/api/v1/dags/sales_daily", nil)
	require.Equal(t, again, got)

	require.Equal(t, 1, e.TableCounts()["dags"])
}

func TestDagGetUnknownIsDagNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodGet, "/api/v1/dags/nope", nil)
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")
}

func TestDagListOrderedByDagIDWithPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"dag_c", "dag_a", "dag_e", "dag_b", "dag_d"} {
		e.PutDag(id, "@daily", "")
	}
	list := func(query string) api.DagCollection {
		t.Helper()
		c := call[api.DagCollection](e, http.StatusOK, http.MethodGet, "/api/v1/dags"+query, nil)
		return c
	}
	ids := func(c api.DagCollection) []string {
		out := make([]string, 0, len(c.Dags))
		for _, d := range c.Dags {
			out = append(out, d.DagId)
		}
		return out
	}

	all := list("")
	require.EqualValues(t, 5, all.TotalEntries)
	require.Equal(t, []string{"dag_a", "dag_b", "dag_c", "dag_d", "dag_e"}, ids(all))

	page := list("?limit=2&offset=1")
	require.EqualValues(t, 5, page.TotalEntries, "total_entries counts every match, not the page")
	require.Equal(t, []string{"dag_b", "dag_c"}, ids(page))

	last := list("?limit=2&offset=4")
	require.EqualValues(t, 5, last.TotalEntries)
	require.Equal(t, []string{"dag_e"}, ids(last))

	past := list("?offset=10")
	require.EqualValues(t, 5, past.TotalEntries)
	require.NotNil(t, past.Dags)
	require.Empty(t, past.Dags)
	require.Contains(t, string(e.Do(http.MethodGet, "/api/v1/dags?offset=10", nil).Body), `"dags":[]`)
}

func TestDagPutRejectsUnusableScheduleOrTimezoneWith422(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name string
		body map[string]any
	}{
		{"not cron", map[string]any{"schedule": "every day please"}},
		{"@every is a duration", map[string]any{"schedule": "@every 1h"}},
		{"unknown descriptor", map[string]any{"schedule": "@fortnightly"}},
		{"six fields", map[string]any{"schedule": "0 0 0 * * *"}},
		{"minute out of range", map[string]any{"schedule": "61 * * * *"}},
		{"never fires", map[string]any{"schedule": "0 0 30 2 *"}},
		{"timezone prefix", map[string]any{"schedule": "CRON_TZ=UTC 0 0 * * *"}},
		{"unknown timezone", map[string]any{"schedule": "@daily", "timezone": "Mars/Olympus_Mons"}},
		{"Local timezone", map[string]any{"schedule": "@daily", "timezone": "Local"}},
	}
	for _, c := range cases {
		res := e.Do(http.MethodPut, "/api/v1/dags/bad_dag", c.body)
		p := requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_dag")
		require.NotEmpty(t, p.Detail, c.name)
	}
	// An existing DAG is not changed by a rejected replacement.
	e.PutDag("good_dag", "@daily", "")
	res := e.Do(http.MethodPut, "/api/v1/dags/good_dag", map[string]any{"schedule": "@every 1h"})
	requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_dag")
	var schedule string
	require.NoError(t, e.DB.Get(&schedule, `SELECT schedule FROM dags WHERE dag_id = 'good_dag'`))
	require.Equal(t, "@daily", schedule)
	require.Equal(t, 1, e.TableCounts()["dags"])
}

func TestDagIDBreakingItsPatternIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := map[string]any{"schedule": "@daily"}
	for _, id := range []string{"bad id!", "slash%2Fin", "ümlaut", strings.Repeat("a", 251)} {
		path := "/api/v1/dags/" + url.PathEscape(id)
		res := e.Do(http.MethodPut, path, body)
		require.NotEqual(t, http.StatusCreated, res.Status, "id %q", id)
		require.Less(t, res.Status, 500)
		if res.Status != http.StatusNotFound { // an escaped slash may not route at all
			requireProblem(t, res, http.StatusBadRequest, "invalid_request")
		}
		res = e.Do(http.MethodGet, path, nil)
		require.Less(t, res.Status, 500)
	}
	// Exactly 250 characters is fine.
	e.PutDag(strings.Repeat("a", 250), "@daily", "")
	require.Equal(t, 1, e.TableCounts()["dags"])

	res := e.Do(http.MethodPut, "/api/v1/dags/"+url.PathEscape("bad id!"), body)
	requireProblem(t, res, http.StatusBadRequest, "invalid_request")
	res = e.Do(http.MethodPut, "/api/v1/dags/"+strings.Repeat("a", 251), body)
	requireProblem(t, res, http.StatusBadRequest, "invalid_request")
}

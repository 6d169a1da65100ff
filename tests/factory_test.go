package tests

// Factories for DAGs and backfills: one env method per operation the tests perform, so that
// every test sends the same request the same way and fails with the answer's body.

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/internal/testkit/invariants"
	"github.com/stretchr/testify/require"
)

// day is a UTC midnight in 2024, the year most fixtures use.
func day(month time.Month, d int) time.Time { return time.Date(2024, month, d, 0, 0, 0, 0, time.UTC) }

// days returns the UTC midnights of January 2024 from first to last, inclusive.
func days(first, last int) []time.Time {
	var out []time.Time
	for d := first; d <= last; d++ {
		out = append(out, day(1, d))
	}
	return out
}

// location loads a time zone from the system's database.
func location(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// str reads an optional string, "<nil>" when absent, so that a comparison says which.
func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func backfillPath(id int64) string { return fmt.Sprintf("/api/v1/backfills/%d", id) }
func retryPath(id int64) string    { return backfillPath(id) + "/retry" }

// call sends a request, requires the answer's status and decodes its body: the three steps
// every factory shares.
func call[T any](e *env, want int, method, path string, body any, headers ...string) T {
	e.t.Helper()
	res := e.Do(method, path, body, headers...)
	require.Equal(e.t, want, res.Status, "%s %s: body: %s", method, path, res.Body)
	var out T
	res.Decode(e.t, &out)
	return out
}

// fields is a request body: base with extra name, value pairs laid over it.
func fields(base map[string]any, extra ...any) map[string]any {
	for i := 0; i+1 < len(extra); i += 2 {
		base[extra[i].(string)] = extra[i+1]
	}
	return base
}

// PutDag creates or replaces a DAG and returns it.
func (e *env) PutDag(dagID, schedule, timezone string) api.Dag {
	e.t.Helper()
	if timezone == "" {
		return e.PutDagWith(dagID, schedule)
	}
	return e.PutDagWith(dagID, schedule, "timezone", timezone)
}

// PutDagWith creates or replaces a DAG with extra body fields (max_active_runs, is_paused, ...).
func (e *env) PutDagWith(dagID, schedule string, extra ...any) api.Dag {
	e.t.Helper()
	res := e.Do(http.MethodPut, "/api/v1/dags/"+dagID, fields(map[string]any{"schedule": schedule}, extra...))
	require.Contains(e.t, []int{http.StatusOK, http.StatusCreated}, res.Status, "body: %s", res.Body)
	var d api.Dag
	res.Decode(e.t, &d)
	return d
}

// backfillBody is a creation request; extra fields override the defaults.
func backfillBody(dagID string, from, to time.Time, extra ...any) map[string]any {
	return fields(map[string]any{"dag_id": dagID, "from_date": ts(from), "to_date": ts(to)}, extra...)
}

// CreateBackfill POSTs a backfill that must be created (201) and returns it.
func (e *env) CreateBackfill(body map[string]any) api.Backfill {
	e.t.Helper()
	return call[api.Backfill](e, http.StatusCreated, http.MethodPost, "/api/v1/backfills", body)
}

// DailyBackfill puts a daily DAG and creates a backfill of it from..to (extra fields as in
// backfillBody): the fixture most tests start from.
func (e *env) DailyBackfill(dagID string, from, to time.Time, extra ...any) api.Backfill {
	e.t.Helper()
	e.PutDag(dagID, "@daily", "")
	return e.CreateBackfill(backfillBody(dagID, from, to, extra...))
}

// GetBackfill reads a backfill.
func (e *env) GetBackfill(id int64) api.Backfill {
	e.t.Helper()
	return call[api.Backfill](e, http.StatusOK, http.MethodGet, backfillPath(id), nil)
}

// DryRun previews a backfill that must answer 200 and returns the plan with its ETag.
func (e *env) DryRun(body map[string]any) (api.DryRunCollection, string) {
	e.t.Helper()
	res := e.Do(http.MethodPost, "/api/v1/backfills/dry_run", body)
	require.Equal(e.t, http.StatusOK, res.Status, "body: %s", res.Body)
	var d api.DryRunCollection
	res.Decode(e.t, &d)
	return d, res.Header.Get("ETag")
}

// PatchBackfill PATCHes a backfill's settings and requires 200.
func (e *env) PatchBackfill(id int64, body map[string]any) api.Backfill {
	e.t.Helper()
	return call[api.Backfill](e, http.StatusOK, http.MethodPatch, backfillPath(id), body)
}

// Action PUTs pause, unpause or cancel and returns the answer, whatever it is.
func (e *env) Action(id int64, action string) *response {
	e.t.Helper()
	return e.Do(http.MethodPut, backfillPath(id)+"/"+action, nil)
}

// ActionOK PUTs pause, unpause or cancel, requires 200 and returns the backfill.
func (e *env) ActionOK(id int64, action string) api.Backfill {
	e.t.Helper()
	b := call[api.Backfill](e, http.StatusOK, http.MethodPut, backfillPath(id)+"/"+action, nil)
	require.Equal(e.t, id, b.Id)
	return b
}

// Slots reads every slot of a backfill in sort order.
func (e *env) Slots(id int64) []api.BackfillDagRun {
	e.t.Helper()
	var all []api.BackfillDagRun
	for offset := 0; ; offset += 1000 {
		page := call[api.BackfillDagRunCollection](e, http.StatusOK, http.MethodGet,
			fmt.Sprintf("%s/dag_runs?limit=1000&offset=%d", backfillPath(id), offset), nil)
		all = append(all, page.BackfillDagRuns...)
		if len(page.BackfillDagRuns) < 1000 {
			require.EqualValues(e.t, page.TotalEntries, len(all))
			return all
		}
	}
}

// TableCounts counts the rows of every table a request for DAGs, backfills or runs can write.
func (e *env) TableCounts() map[string]int {
	e.t.Helper()
	return e.countRows("dags", "dag_runs", "backfills", "backfill_dag_runs", "idempotency_keys")
}

// countRows counts the rows of each table.
func (e *env) countRows(tables ...string) map[string]int {
	e.t.Helper()
	out := make(map[string]int, len(tables))
	for _, tbl := range tables {
		out[tbl] = e.Count(fmt.Sprintf(`SELECT count(*) FROM %q`, tbl))
	}
	return out
}

// Count runs a query that answers one number, such as a count(*).
func (e *env) Count(query string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.DB.Get(&n, query, args...))
	return n
}

// publicTables lists the service's tables from the catalog, so that a table added later is
// covered too.
func (e *env) publicTables() []string {
	e.t.Helper()
	var tables []string
	require.NoError(e.t, e.DB.Select(&tables, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'
		AND tablename NOT LIKE 'goose%' ORDER BY tablename`))
	return tables
}

// InstallClaimAudit makes every claim commit record the backfill's state and limits in force
// then (invariants.InstallClaimAudit), for tests that check what each claim saw.
func (e *env) InstallClaimAudit() {
	e.t.Helper()
	require.NoError(e.t, invariants.InstallClaimAudit(context.Background(), e.DB))
}

// requirePaused requires the backfill to be paused for this reason.
func requirePaused(t testing.TB, b api.Backfill, reason api.BackfillPauseReason) {
	t.Helper()
	require.Equal(t, api.BackfillStatePaused, b.State)
	require.True(t, b.IsPaused)
	require.NotNil(t, b.PauseReason)
	require.Equal(t, reason, *b.PauseReason)
}

// requireInstant compares instants, whatever their time zone.
func requireInstant(t testing.TB, want time.Time, got *time.Time, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, got, msgAndArgs...)
	require.True(t, want.Equal(*got), "want %s, got %s %v", want.UTC(), got.UTC(), fmt.Sprint(msgAndArgs...))
}

func TestHarnessServesHealthAndValidatesAgainstSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodGet, "/healthz", nil)
	require.Equal(t, http.StatusOK, res.Status)
	res = e.Do(http.MethodGet, "/readyz", nil)
	require.Equal(t, http.StatusOK, res.Status)
	res = e.Do(http.MethodGet, "/api/v1/nowhere", nil)
	require.Equal(t, http.StatusNotFound, res.Status)
	b := e.DailyBackfill("harness", day(1, 1), day(1, 3))
	require.EqualValues(t, 3, b.Progress.Total)
}

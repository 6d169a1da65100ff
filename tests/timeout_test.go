package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// A statement that really runs into statement_timeout (here: waiting for a row lock that
// another session holds) is answered 503 `timeout` with Retry-After and a detail that says
// so, not "the database cannot be reached"; nothing was changed, and the same request
// succeeds once the lock is gone. Every answer is checked against the spec by e.Do.
func TestStatementTimeoutAnswers503TimeoutWithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("locked", day(1, 1), day(1, 3))

	// Every new session of this database stops statements after 300 ms.
	var dbName string
	require.NoError(t, e.DB.Get(&dbName, `SELECT current_database()`))
	_, err := e.DB.Exec(fmt.Sprintf(`ALTER DATABASE %s SET statement_timeout = '300ms'`, pq.QuoteIdentifier(dbName)))
	require.NoError(t, err)
	var altered time.Time
	require.NoError(t, e.DB.Get(&altered, `SELECT clock_timestamp()`))

	ctx := context.Background()
	holder, err := e.DB.Connx(ctx)
	require.NoError(t, err)
	defer holder.Close()
	// The service's sessions opened before the setting are closed, so that it takes the
	// setting everywhere: the pool closes its idle ones, and one that a background loop (the
	// hub's poll, the deliverer's) was using at that moment once it is handed back. Closing
	// the idle ones once was not enough: the PUT below got a session without the setting and
	// waited for the held row until CI's timeout (2026-12-04).
	require.Eventually(t, func() bool {
		e.DB.SetMaxIdleConns(0)
		e.DB.SetMaxIdleConns(40)
		var old int
		require.NoError(t, holder.GetContext(ctx, &old, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
				AND backend_start < $1 AND pid <> pg_backend_pid()
				AND application_name <> $2`, altered, claimWakerApp))
		return old == 0
	}, 10*time.Second, 20*time.Millisecond, "the service's sessions from before the setting are closed")

	// Another session holds the DAG's and the backfill's rows.
	for _, q := range []string{`BEGIN`, `SELECT 1 FROM dags WHERE dag_id = 'locked' FOR UPDATE`,
		fmt.Sprintf(`SELECT 1 FROM backfills WHERE id = %d FOR UPDATE`, b.Id)} {
		_, err = holder.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}

	for _, req := range []struct{ method, path string }{
		{http.MethodPut, "/api/v1/dags/locked"},
		{http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/cancel", b.Id)},
	} {
		var body any
		if strings.HasPrefix(req.path, "/api/v1/dags/") {
			body = map[string]any{"schedule": "@hourly", "description": "changed"}
		}
		res := e.Do(req.method, req.path, body)
		p := requireProblem(t, res, http.StatusServiceUnavailable, "timeout", req.method, " ", req.path)
		require.NotEmpty(t, res.Header.Get("Retry-After"))
		require.Contains(t, p.Detail, "time limit")
		require.False(t, strings.Contains(p.Detail, "cannot be reached"), p.Detail)
	}

	_, err = holder.ExecContext(ctx, `ROLLBACK`)
	require.NoError(t, err)
	// Nothing was changed by the stopped requests.
	var schedule string
	require.NoError(t, e.DB.Get(&schedule, `SELECT schedule FROM dags WHERE dag_id = 'locked'`))
	require.Equal(t, "@daily", schedule)
	require.Equal(t, "running", string(e.GetBackfill(b.Id).State))
	// The same request succeeds now.
	res := e.Do(http.MethodPut, "/api/v1/dags/locked", map[string]any{"schedule": "@hourly"})
	require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
}

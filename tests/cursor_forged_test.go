package tests

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A cursor is not signed, so a client can send any key in one. Every key that is not the form
// the service writes for that listing is 400 invalid_request naming the cursor, never a
// database error: UTC offsets PostgreSQL refuses (beyond ±15:59, a minute of 60), offsets
// other than Z, and integers in any spelling but plain decimal.
func TestForgedCursorKeysAre400OnEveryListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("fc", "@daily", "UTC")
	b := e.DailyBackfill("fc", day(1, 1), day(1, 3))
	runs := "/api/v1/dags/fc/runs?cursor="
	slots := backfillPath(b.Id) + "/dag_runs?cursor="
	cases := []string{
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00+16:00"),
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00-23:59"),
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00+00:60"),
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00+01:00"),
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00.0000001Z"),
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00.500Z"),
		runs + forgedCursor("runs", "", "0001-01-01T00:00:00+00:01"),
		"/api/v1/backfills?cursor=" + forgedCursor("backfills", "id", "+1"),
		"/api/v1/backfills?cursor=" + forgedCursor("backfills", "id", "01"),
		"/api/v1/backfills?cursor=" + forgedCursor("backfills", "-id", " 1"),
		slots + forgedCursor("slots", "sort_ordinal", "-0"),
		slots + forgedCursor("slots", "sort_ordinal", "1e0"),
	}
	for _, path := range cases {
		p := requireProblem(t, e.Do(http.MethodGet, path, nil), http.StatusBadRequest, "invalid_request", path)
		require.Equal(t, "cursor", (*p.Errors)[0].Field, path)
	}
	// The key the service writes is still taken.
	for _, path := range []string{
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00Z"),
		runs + forgedCursor("runs", "", "2024-01-01T00:00:00.5Z"),
		"/api/v1/backfills?cursor=" + forgedCursor("backfills", "id", "1"),
		slots + forgedCursor("slots", "sort_ordinal", "1"),
		"/api/v1/dags?cursor=" + forgedCursor("dags", "", "fc"),
	} {
		res := e.Do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, res.Status, "%s: %s", path, res.Body)
	}
}

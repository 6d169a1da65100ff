package tests

import (
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// A path whose unreserved characters are percent-encoded names the same resource as the
// plain one (RFC 3986 §6.2.2.2): `/dags/d%31` is DAG `d1`, `/backfills/%31` backfill 1. An
// escaped `/` inside a segment stays part of the segment, and no id takes one: 400.
func TestPathEscapesOfUnreservedCharactersNameTheSameResource(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("d1", "@daily", "UTC")
	b := e.DailyBackfill("d1", day(1, 1), day(1, 3))
	require.Equal(t, int64(1), b.Id, "the first backfill of a fresh database")
	e.PutPool("p1", 2, http.StatusCreated)

	for _, path := range []string{"/api/v1/dags/d%31", "/api/v1/dags/%64%31", "/api/v1/dags/d%31?x=%31"} {
		r := e.Do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", path, r.Body)
		var d api.Dag
		r.Decode(t, &d)
		require.Equal(t, "d1", d.DagId, path)
	}
	r := e.Do(http.MethodGet, "/api/v1/backfills/%31", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.Do(http.MethodGet, "/api/v1/dags/d%31/runs?limit=1", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.Do(http.MethodGet, "/api/v1/pools/p%31", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.Do(http.MethodPut, "/api/v1/backfills/%31/pause", nil)
	require.Equal(t, http.StatusOK, r.Status, "a write too: %s", r.Body)

	for _, path := range []string{"/api/v1/dags/d%2F1", "/api/v1/dags/d%251"} {
		requireProblem(t, e.Do(http.MethodGet, path, nil), http.StatusBadRequest, "invalid_request", path)
	}
}

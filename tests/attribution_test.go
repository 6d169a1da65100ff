package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// code_ref is fixed at creation: no PATCH changes it, every claimed run carries it, a retry
// inherits it unless it names another, and one past 200 characters is 422 with nothing written.
func TestCodeRefIsFrozenAndAnsweredOnClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("code", "@daily", "")
	const ref = "sha256:9b2f0c1e4d8a7f6e5d4c3b2a19087f6e"

	before := e.TableCounts()
	for _, bad := range []string{strings.Repeat("a", 201), "", "two words"} {
		requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("code", day(1, 1), day(1, 2), "code_ref", bad)),
			http.StatusUnprocessableEntity, "invalid_code_ref")
		requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("code", day(1, 1), day(1, 2), "code_ref", bad)),
			http.StatusUnprocessableEntity, "invalid_code_ref")
	}
	require.Equal(t, before, e.TableCounts(), "a refused code_ref writes nothing")

	b := e.DailyBackfill("code", day(1, 1), day(1, 2), "code_ref", strings.Repeat("c", 200))
	require.Equal(t, strings.Repeat("c", 200), *b.CodeRef, "200 characters are allowed")
	e.ActionOK(b.Id, "cancel")
	e.SweepOnce()

	e.PutDag("code2", "@daily", "")
	b = e.DailyBackfill("code2", day(1, 1), day(1, 2), "code_ref", ref)
	require.Equal(t, ref, *b.CodeRef)
	requireProblem(t, e.Do(http.MethodPatch, backfillPath(b.Id), map[string]any{"code_ref": "other"}),
		http.StatusBadRequest, "invalid_request")
	require.Equal(t, ref, *e.GetBackfill(b.Id).CodeRef)

	runs := e.ClaimDag("w", "code2", 2)
	require.Len(t, runs, 2)
	for _, r := range runs {
		require.NotNil(t, r.CodeRef, "a claimed run carries its backfill's code_ref")
		require.Equal(t, ref, *r.CodeRef)
	}
	e.ReportFailed(runs[0], "broken")
	e.Report(runs[1], "success")
	e.SweepOnce()

	// A retry inherits the code_ref; one given replaces it, and its claims carry the new one.
	retry := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(b.Id), nil)
	require.Equal(t, ref, *retry.CodeRef)
	e.ActionOK(retry.Id, "cancel")
	e.SweepOnce()
	requireProblem(t, e.Do(http.MethodPost, retryPath(b.Id), map[string]any{"code_ref": strings.Repeat("x", 201)}),
		http.StatusUnprocessableEntity, "invalid_code_ref")
	fixed := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(b.Id), map[string]any{"code_ref": "git:fixed"})
	require.Equal(t, "git:fixed", *fixed.CodeRef)
	again := e.ClaimDag("w", "code2", 1)
	require.Len(t, again, 1)
	require.Equal(t, "git:fixed", *again[0].CodeRef)
	checkInvariants(t, e.DB)
}

// created_by is the X-Actor header where there is no per-user identity; reason says why. Both
// are in the API and in the events; a retry records its own.
func TestCreatedByAndReasonAreRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("who", "@daily", "")
	b := call[api.Backfill](e, http.StatusCreated, http.MethodPost, "/api/v1/backfills",
		backfillBody("who", day(1, 1), day(1, 2), "reason", "DATA-7: upstream fix"), "X-Actor", "alice@example.com")
	require.Equal(t, "alice@example.com", *b.CreatedBy)
	require.Equal(t, "DATA-7: upstream fix", *b.Reason)
	got := e.GetBackfill(b.Id)
	require.Equal(t, b.CreatedBy, got.CreatedBy)
	require.Equal(t, b.Reason, got.Reason)
	evs := evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created"}, evTypes(evs))
	evRequireSnapshot(t, evs[0], evGetRaw(e, b.Id))
	require.Contains(t, string(evs[0].Data.Backfill), `"created_by":"alice@example.com"`)
	require.Contains(t, string(evs[0].Data.Backfill), `"reason":"DATA-7: upstream fix"`)

	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("who", day(1, 1), day(1, 2),
		"reason", strings.Repeat("r", 501))), http.StatusBadRequest, "invalid_request")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("who", day(1, 1), day(1, 2)),
		"X-Actor", strings.Repeat("a", 201)), http.StatusBadRequest, "invalid_request")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("who", day(1, 1), day(1, 2)),
		"X-Actor", "bob\u200b"), http.StatusBadRequest, "invalid_request")

	for _, r := range e.ClaimDag("w", "who", 2) {
		e.ReportFailed(r, "broken")
	}
	e.SweepOnce()
	retry := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(b.Id),
		map[string]any{"reason": "second go"}, "X-Actor", "bob")
	require.Equal(t, "bob", *retry.CreatedBy)
	require.Equal(t, "second go", *retry.Reason)
	e.ActionOK(retry.Id, "cancel")
	e.SweepOnce()
	anon := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(b.Id), nil)
	require.Nil(t, anon.CreatedBy, "no X-Actor: nobody known")
	require.Nil(t, anon.Reason, "a retry's reason is its own, not the parent's")
}

// API_TOKEN's tokens are shared secrets (several only for rotation), so with tokens too the
// principal is the X-Actor header.
func TestCreatedByIsTheActorHeaderWithTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens(authTokenA, authTokenB))
	e.Token = authTokenB
	e.PutDag("who_tokens", "@daily", "")
	b := call[api.Backfill](e, http.StatusCreated, http.MethodPost, "/api/v1/backfills",
		backfillBody("who_tokens", day(1, 1), day(1, 2)), "X-Actor", "alice")
	require.Equal(t, "alice", *b.CreatedBy)
}

package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// The operator controls (failure budget, PATCH, retry) change backfills too: each writes its
// event in the same transaction, with the snapshot GET answers right after.
func TestEventsOfOperatorControls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("ops_events", day(1, 1), day(1, 3), "max_failed_runs", 1)

	// A failed run spends the budget: paused by failure_budget, in the report's transaction.
	run := e.Claim("w", 1)[0]
	e.Report(run, "failed")
	evs := evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created", "backfill.paused"}, evTypes(evs))
	require.NotNil(t, evs[1].Data.Reason)
	require.Equal(t, "failure_budget", *evs[1].Data.Reason)
	evRequireSnapshot(t, evs[1], evGetRaw(e, b.Id))

	// PATCH of a setting, and of the budget alone, are each an update.
	res := e.Do(http.MethodPatch, fmt.Sprintf("/api/v1/backfills/%d", b.Id), `{"max_active_runs": 3}`,
		"Content-Type", "application/merge-patch+json")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	res = e.Do(http.MethodPatch, fmt.Sprintf("/api/v1/backfills/%d", b.Id), `{"max_failed_runs": 5}`,
		"Content-Type", "application/merge-patch+json")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	evs = evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created", "backfill.paused", "backfill.updated", "backfill.updated"}, evTypes(evs))
	evRequireSnapshot(t, evs[3], evGetRaw(e, b.Id))

	// Cancel, then retry the failed and canceled slots: the new backfill's created event
	// names its parent.
	e.ActionOK(b.Id, "cancel")
	retry := e.Do(http.MethodPost, fmt.Sprintf("/api/v1/backfills/%d/retry", b.Id), map[string]any{})
	require.Equal(t, http.StatusCreated, retry.Status, "body: %s", retry.Body)
	var child struct {
		ID int64 `json:"id"`
	}
	retry.Decode(t, &child)
	childEvs := evOf(e, child.ID)
	require.Equal(t, []string{"backfill.created"}, evTypes(childEvs))
	var snap struct {
		ParentBackfillID *int64 `json:"parent_backfill_id"`
	}
	require.NoError(t, json.Unmarshal(childEvs[0].Data.Backfill, &snap))
	require.Equal(t, b.Id, *snap.ParentBackfillID)
	evRequireSnapshot(t, childEvs[0], evGetRaw(e, child.ID))
}

// A failure injected after the change, inside its transaction, rolls both back: for a PATCH
// and for the report that spends the failure budget.
func TestOperatorControlEventsRollBackWithTheirChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("ops_rollback", day(1, 1), day(1, 3), "max_failed_runs", 1)

	lift := evInjectFailure(t, e.DB, "backfill.updated")
	res := e.Do(http.MethodPatch, fmt.Sprintf("/api/v1/backfills/%d", b.Id), `{"max_active_runs": 7}`,
		"Content-Type", "application/merge-patch+json")
	require.Equal(t, http.StatusInternalServerError, res.Status, "body: %s", res.Body)
	require.EqualValues(t, b.MaxActiveRuns, e.GetBackfill(b.Id).MaxActiveRuns, "the PATCH rolled back with its event")
	lift()

	run := e.Claim("w", 1)[0]
	lift = evInjectFailure(t, e.DB, "backfill.paused")
	res = e.PatchRun(run.DagId, run.RunId, "failed", "w")
	require.Equal(t, http.StatusInternalServerError, res.Status, "body: %s", res.Body)
	got := e.GetBackfill(b.Id)
	require.EqualValues(t, "running", got.State, "the budget pause rolled back with its event")
	require.EqualValues(t, 0, got.Progress.Failed, "and so did the failure that spent the budget")
	require.EqualValues(t, "running", e.GetRun(run.DagId, run.RunId).State)
	lift()
	require.Equal(t, []string{"backfill.created"}, evTypes(evOf(e, b.Id)))
}

// A webhook receives the events real backfill changes write, signed, as GET /events serves
// them.
func TestWebhookDeliversEventsOfRealChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, nil)
	w := e.createWebhook(rc.URL, "backfill.created", "backfill.canceled")
	b := e.DailyBackfill("hook_real", day(1, 1), day(1, 2))
	e.ActionOK(b.Id, "pause")
	e.ActionOK(b.Id, "cancel")
	e.localDeliverer().runOnce(t)

	got := rc.Got()
	require.Len(t, got, 2, "only the subscribed types: created and canceled")
	served := evOf(e, b.Id)
	byID := map[string]evEvent{}
	for _, ev := range served {
		byID[strconv.FormatInt(ev.ID, 10)] = ev
	}
	var types []string
	for _, d := range got {
		require.NoError(t, client.VerifyWebhook(w.Secret, d.Header, d.Body))
		ev, ok := byID[d.Header.Get("webhook-id")]
		require.True(t, ok, "webhook-id %s is an event of the backfill", d.Header.Get("webhook-id"))
		var body evEvent
		require.NoError(t, json.Unmarshal(d.Body, &body))
		require.Equal(t, ev.Type, body.Type)
		require.Equal(t, evExact(t, ev.Data.Backfill), evExact(t, body.Data.Backfill), "the same JSON GET /events serves")
		types = append(types, body.Type)
	}
	require.ElementsMatch(t, []string{"backfill.created", "backfill.canceled"}, types)
}

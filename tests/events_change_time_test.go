package tests

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// A backfill's events order by occurred_at as its changes were made
// (migrations/00020_change_times_in_order.sql). Pauses, unpauses and PATCHes race on one
// backfill, released together; then its events, sorted by occurred_at, must replay as one
// history: every time distinct and equal to its snapshot's updated_at, each pause after a
// running snapshot, each unpause after a paused one, each PATCH keeping its predecessor's
// state, and the last one the backfill as GET answers it. With now() as the time, a change
// that waited for another's row lock could carry the earlier time (an audit found 649
// inversions in 4,000 events, and a receiver ending on the wrong state).
func TestEventTimesOrderABackfillsChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("ev_times", day(1, 1), day(1, 4))
	const rounds, each = 12, 3
	for r := range rounds {
		releaseTogether(t, 3*each, func(i int) error {
			var res *response
			switch i % 3 {
			case 0:
				res = e.Action(b.Id, "pause")
			case 1:
				res = e.Action(b.Id, "unpause")
			default:
				res = e.Do(http.MethodPatch, backfillPath(b.Id), map[string]any{"description": fmt.Sprintf("r%d-%d", r, i)})
			}
			if res.Status != http.StatusOK {
				return fmt.Errorf("request %d: %d %s", i, res.Status, res.Body)
			}
			return nil
		})
	}

	var feed api.EventCollection
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/events?backfill_id=%d&limit=1000", b.Id), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	res.Decode(t, &feed)
	evs := feed.Events
	require.Greater(t, len(evs), rounds, "the races changed the backfill")
	slices.SortFunc(evs, func(a, b api.Event) int { return a.OccurredAt.Compare(b.OccurredAt) })
	require.Equal(t, api.EventType("backfill.created"), evs[0].Type)
	for i, ev := range evs {
		snap := ev.Data.Backfill
		require.True(t, ev.OccurredAt.Equal(snap.UpdatedAt), "event %d (%s): occurred_at %v, snapshot updated_at %v",
			ev.Id, ev.Type, ev.OccurredAt, snap.UpdatedAt)
		if i == 0 {
			continue
		}
		prev := evs[i-1]
		require.True(t, prev.OccurredAt.Before(ev.OccurredAt), "events %d and %d share a time", prev.Id, ev.Id)
		was := prev.Data.Backfill.State
		switch ev.Type {
		case "backfill.paused":
			require.Equal(t, api.BackfillState("running"), was, "event %d paused a backfill that was %s", ev.Id, was)
		case "backfill.unpaused":
			require.Equal(t, api.BackfillState("paused"), was, "event %d unpaused a backfill that was %s", ev.Id, was)
		case "backfill.updated":
			require.Equal(t, was, snap.State, "event %d: a PATCH changed the state", ev.Id)
		default:
			t.Fatalf("unexpected event %d %s", ev.Id, ev.Type)
		}
	}
	last, now := evs[len(evs)-1].Data.Backfill, e.GetBackfill(b.Id)
	require.Equal(t, now.State, last.State, "the latest event by occurred_at is the backfill's state")
	require.Equal(t, now.Description, last.Description)
	require.True(t, now.UpdatedAt.Equal(last.UpdatedAt))
}

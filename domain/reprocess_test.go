package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The contract's reprocess table, every behaviour against every run state.
func TestSkipReason(t *testing.T) {
	const take = ""
	want := map[ReprocessBehavior]map[RunState]string{
		ReprocessNone: {
			RunQueued: ReasonInFlight, RunRunning: ReasonInFlight,
			RunSuccess: ReasonAlreadyExists, RunFailed: ReasonAlreadyExists, RunCanceled: ReasonAlreadyExists,
		},
		ReprocessFailed: {
			RunQueued: ReasonInFlight, RunRunning: ReasonInFlight,
			RunSuccess: ReasonAlreadyExists, RunFailed: take, RunCanceled: take,
		},
		ReprocessCompleted: {
			RunQueued: ReasonInFlight, RunRunning: ReasonInFlight,
			RunSuccess: take, RunFailed: take, RunCanceled: take,
		},
	}
	for behavior, byState := range want {
		require.Len(t, byState, 5, "every run state of %s", behavior)
		for state, reason := range byState {
			t.Run(string(behavior)+"/"+string(state), func(t *testing.T) {
				got, skip := SkipReason(behavior, state)
				require.Equal(t, reason != take, skip)
				require.Equal(t, reason, got)
			})
		}
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name       string
		behavior   ReprocessBehavior
		state      RunState
		wantAction SlotAction
		wantReason string
		wantRunID  int64
	}{
		{"takes over a failed run", ReprocessFailed, RunFailed, ActionReprocess, "", 7},
		{"skips a successful run", ReprocessFailed, RunSuccess, ActionSkip, ReasonAlreadyExists, 0},
		{"skips a run in flight", ReprocessCompleted, RunRunning, ActionSkip, ReasonInFlight, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slot := PlannedSlot{SortOrdinal: 3, LogicalDate: day(2), Action: ActionCreate}
			Decide(&slot, tc.behavior, 7, tc.state)
			require.Equal(t, tc.wantAction, slot.Action)
			require.Equal(t, tc.wantRunID, slot.ExistingRunID)
			if tc.wantReason == "" {
				require.Nil(t, slot.ExceptionReason)
			} else {
				require.NotNil(t, slot.ExceptionReason)
				require.Equal(t, tc.wantReason, *slot.ExceptionReason)
			}
			require.Equal(t, 3, slot.SortOrdinal, "deciding leaves the slot's place alone")
		})
	}
}

// Runs are matched to slots by instant, whatever the zone they were read in; slots without
// a run stay to be created.
func TestDecideExisting(t *testing.T) {
	slots, err := PlanSlots("@daily", "UTC", BackfillRequest{FromDate: day(1), ToDate: day(4)}, day(10), 10)
	require.NoError(t, err)
	DecideExisting(slots, ReprocessFailed, []ExistingRun{
		{ID: 11, LogicalDate: day(2).In(time.FixedZone("minus5", -5*60*60)), State: RunFailed},
		{ID: 12, LogicalDate: day(3), State: RunQueued},
		{ID: 13, LogicalDate: day(9), State: RunFailed}, // outside the plan: ignored
	})
	require.Equal(t, []SlotAction{ActionCreate, ActionReprocess, ActionSkip, ActionCreate},
		[]SlotAction{slots[0].Action, slots[1].Action, slots[2].Action, slots[3].Action})
	require.Equal(t, int64(11), slots[1].ExistingRunID)
	require.Equal(t, ReasonInFlight, *slots[2].ExceptionReason)
	require.Zero(t, slots[0].ExistingRunID)
	require.Zero(t, slots[3].ExistingRunID)

	before := append([]PlannedSlot(nil), slots...)
	DecideExisting(slots, ReprocessCompleted, nil)
	require.Equal(t, before, slots, "no runs: nothing changes")
}

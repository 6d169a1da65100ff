package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Dagster#19087: a child with a lookback was started with its parent. Here a day of a rolling
// model (lookback 2) waits for that day and the two before it, and is claimable only once
// the last of them succeeded.
func TestGroupLookbackChildNeverStartsWithItsParent_Dagster19087(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("parent", "@daily", "")
	e.PutDagWith("rolling", "@daily", "upstreams", []any{up("parent", "lookback", 2)})
	g := e.CreateGroup([]string{"parent"}, day(1, 1), day(1, 5), "include_downstream", "direct")
	require.Equal(t, int64(1+2+3+3+3), g.Dependencies)

	e.MarkRunSucceeded("parent", day(1, 3))
	e.MarkRunSucceeded("parent", day(1, 4))
	require.Empty(t, e.ClaimDag("w", "rolling", 5), "day 4 still waits for day 2")
	e.MarkRunSucceeded("parent", day(1, 2))
	got := e.ClaimDag("w", "rolling", 5)
	require.Len(t, got, 1)
	require.True(t, got[0].LogicalDate.Equal(day(1, 4)), "days 3 and 4 had all of days 1..4 but day 1: only day 4's window is done")
}

// Dagster#16952: a grandchild was launched before its parent's data existed when the parent
// was not selected. Here B is left out of the group: C waits for the A runs that the B runs it
// depends on would wait for (the hours of its day), and runs only after them.
func TestGroupGrandchildWaitsForTheDataOfAParentLeftOut_Dagster16952(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("raw", "@hourly", "")
	e.PutDagWith("clean", "@daily", "upstreams", []any{up("raw")})
	e.PutDagWith("report", "@daily", "upstreams", []any{up("clean")})
	g := e.CreateGroup([]string{"raw", "report"}, day(1, 1), day(1, 1).Add(23*time.Hour))
	require.Len(t, g.Members, 2, "clean is not in the group")
	require.Equal(t, int32(1), member(t, g, "report").Depth)
	require.Equal(t, int64(24), g.Dependencies, "the report's day waits for the day's 24 raw hours")
	for h := range 23 {
		e.MarkRunSucceeded("raw", day(1, 1).Add(time.Duration(h)*time.Hour))
	}
	require.Empty(t, e.ClaimDag("w", "report", 5))
	e.MarkRunSucceeded("raw", day(1, 1).Add(23*time.Hour))
	require.Len(t, e.ClaimDag("w", "report", 5), 1)
}

// depends_on_past: each run waits for its DAG's previous slot in the group; a slot that
// already succeeded (skipped) satisfies the next.
func TestGroupDependsOnPastRunsTheSlotsInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDagWith("past", "@daily", "depends_on_past", true)
	e.SucceededManualRuns("past", day(1, 3))
	g := e.CreateGroup([]string{"past"}, day(1, 1), day(1, 5), "max_active_runs", 10)
	require.Equal(t, int64(2), g.Dependencies, "day 2 waits for day 1, day 5 for day 4; day 4 for day 3, done")
	got := e.ClaimDag("w", "past", 10)
	require.Len(t, got, 2, "day 1 and day 4")
	for _, r := range got {
		e.Report(r, "success")
	}
	got = e.ClaimDag("w", "past", 10)
	require.Len(t, got, 2, "days 2 and 5")
}

// Claims prefer the runs nearest the top of the graph: with a's later days queued and b's first
// day unblocked, a claim of one hands out a's first, then b's.
func TestGroupClaimsPreferTheTopOfTheGraph(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("top", "@daily", "")
	e.PutDagWith("below", "@daily", "upstreams", []any{up("top")})
	e.CreateGroup([]string{"below", "top"}, day(1, 1), day(1, 4))
	e.MarkRunSucceeded("top", day(1, 1))
	got := e.ClaimN(1, "w", 1)
	require.Equal(t, "top", got[0].DagId)
	require.True(t, got[0].LogicalDate.Equal(day(1, 2)), "then sort_ordinal")
	got = e.ClaimN(3, "w", 5)
	require.Equal(t, []string{"top", "top", "below"}, []string{got[0].DagId, got[1].DagId, got[2].DagId})
}

// A DAG whose schedule has no slot in the window is no member: its dependents wait, through
// it, for the members above it.
func TestGroupLeavesOutADagWithNoSlotInTheWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("days", "@daily", "")
	e.PutDagWith("monthly", "@monthly", "upstreams", []any{up("days")})
	e.PutDagWith("after", "@daily", "upstreams", []any{up("monthly")})
	g := e.CreateGroup([]string{"days"}, day(1, 2), day(1, 4), "include_downstream", "all")
	require.Len(t, g.Members, 2, "monthly has no slot from January 2 to 4")
	require.Equal(t, int32(1), member(t, g, "after").Depth)
	// after's days wait, through monthly's January, for every day of the month the group runs.
	require.Equal(t, int64(3*3), g.Dependencies)
}

package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// A run taken over twice, A → B → C: each terminal backfill's slot listing goes on showing
// the run as it was when the next backfill took it (state, attempt, note), however the run
// changes afterwards, and the invariants hold at every step.
func TestReprocessKeepsEachOwnersRecordThroughTwoTakeovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "history"

	// A: day 1 succeeds, days 2 and 3 fail with notes; day 3 on its third attempt.
	a := e.DailyBackfill(dag, day(1, 1), day(1, 3))
	runs := e.ClaimDag("wa", dag, 10)
	require.Len(t, runs, 3)
	e.Report(runs[0], "success")
	e.ReportFailed(runs[1], "A: disk full")
	e.ReportFailed(runs[2], "A: timeout")
	_, err := e.DB.Exec(`UPDATE dag_runs SET attempt = 3 WHERE id = $1`, runs[2].Id)
	require.NoError(t, err)
	e.SweepOnce()
	require.Equal(t, api.BackfillState("failed"), e.GetBackfill(a.Id).State)
	recordA := e.Slots(a.Id)
	requireSlot(t, recordA[0], "success", 1, nil)
	requireSlot(t, recordA[1], "failed", 1, new("A: disk full"))
	requireSlot(t, recordA[2], "failed", 3, new("A: timeout"))

	// B takes the two failed runs over: day 2 now succeeds, day 3 fails again.
	e.Clock.Advance(time.Minute)
	b := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 3), "reprocess_behavior", "failed"))
	require.Equal(t, api.BackfillProgress{Total: 3, Queued: 2, Skipped: 1}, b.Progress)
	require.Equal(t, recordA, e.Slots(a.Id), "A's record after B took two of its runs")
	runs = e.ClaimDag("wb", dag, 10)
	require.Len(t, runs, 2)
	e.Report(runs[0], "success")
	e.ReportFailed(runs[1], "B: out of memory")
	e.SweepOnce()
	require.Equal(t, api.BackfillState("failed"), e.GetBackfill(b.Id).State)
	require.Equal(t, recordA, e.Slots(a.Id), "A's record after B's runs ended")
	recordB := e.Slots(b.Id)
	require.Nil(t, recordB[0].DagRunId, "B skipped day 1")
	// A taken-over run goes on counting its attempts: day 2 from A's 1, day 3 from A's 3.
	requireSlot(t, recordB[1], "success", 2, nil)
	requireSlot(t, recordB[2], "failed", 4, new("B: out of memory"))
	checkInvariants(t, e.DB)

	// C takes every run over: day 1 from A, days 2 and 3 from B.
	e.Clock.Advance(time.Minute)
	c := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 3), "reprocess_behavior", "completed"))
	require.Equal(t, api.BackfillProgress{Total: 3, Queued: 3}, c.Progress)
	require.Equal(t, recordA, e.Slots(a.Id), "A's record after C took its last run")
	require.Equal(t, recordB, e.Slots(b.Id), "B's record after C took its runs")
	// A queued run keeps its last note until it is claimed again.
	for i, s := range e.Slots(c.Id) {
		requireSlot(t, s, "queued", []int{2, 3, 5}[i], []*string{nil, nil, new("B: out of memory")}[i])
	}
	checkInvariants(t, e.DB)

	// C's runs change; the older records do not.
	runs = e.ClaimDag("wc", dag, 10)
	require.Len(t, runs, 3)
	for _, r := range runs {
		e.Report(r, "success")
	}
	e.SweepOnce()
	require.Equal(t, api.BackfillState("succeeded"), e.GetBackfill(c.Id).State)
	require.Equal(t, recordA, e.Slots(a.Id))
	require.Equal(t, recordB, e.Slots(b.Id))

	// A retry of A picks its slots from A's record (days 2 and 3 failed), not from the runs'
	// present (all succeeded, which would leave nothing to retry); as reprocess_behavior
	// failed, it then skips both, their runs having succeeded since.
	retry := call[api.Backfill](e, http.StatusCreated, http.MethodPost, retryPath(a.Id), nil)
	require.Equal(t, api.BackfillProgress{Total: 2, Skipped: 2}, retry.Progress)
	checkInvariants(t, e.DB)
}

// requireSlot checks what a slot listing shows of a slot's run.
func requireSlot(t *testing.T, s api.BackfillDagRun, state string, attempt int, note *string) {
	t.Helper()
	require.NotNil(t, s.State, "slot %v has a state", s.LogicalDate)
	require.EqualValues(t, state, *s.State, "slot %v", s.LogicalDate)
	require.NotNil(t, s.Attempt, "slot %v has an attempt", s.LogicalDate)
	require.EqualValues(t, attempt, *s.Attempt, "slot %v attempt", s.LogicalDate)
	require.Equal(t, note, s.Note, "slot %v note", s.LogicalDate)
}

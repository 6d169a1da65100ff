package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// ---- creation ----

func TestBackfillCreateAnswersBackfillWithDefaultsAndQueuedRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("sales", "@daily", "")

	// Dates with an offset are read as instants; the answer is in UTC.
	body := map[string]any{"dag_id": "sales", "from_date": "2024-01-01T01:00:00+01:00", "to_date": "2024-01-05T00:00:00Z"}
	res := e.Do(http.MethodPost, "/api/v1/backfills", body)
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	var b api.Backfill
	res.Decode(t, &b)
	require.Equal(t, fmt.Sprintf("/api/v1/backfills/%d", b.Id), res.Header.Get("Location"))
	require.Empty(t, res.Header.Get("Idempotent-Replayed"))
	require.Positive(t, b.Id)
	require.Equal(t, "sales", b.DagId)
	require.Equal(t, day(1, 1), b.FromDate)
	require.Equal(t, time.UTC, b.FromDate.Location())
	require.Equal(t, day(1, 5), b.ToDate)
	require.False(t, b.RunBackwards)
	require.Equal(t, api.ReprocessBehavior("none"), b.ReprocessBehavior)
	require.EqualValues(t, 10, b.MaxActiveRuns)
	require.Nil(t, b.DagRunConf)
	require.Contains(t, string(res.Body), `"dag_run_conf":null`)
	require.Nil(t, b.Description)
	require.Equal(t, api.BackfillState("running"), b.State)
	require.False(t, b.IsPaused)
	require.Nil(t, b.CompletedAt)
	require.Equal(t, e.Clock.Now(), b.CreatedAt)
	require.Equal(t, api.BackfillProgress{Total: 5, Queued: 5}, b.Progress)

	// GET and the Location agree with the answer.
	require.Equal(t, b, e.GetBackfill(b.Id))

	slots := e.Slots(b.Id)
	require.Len(t, slots, 5)
	runs := e.ListRuns("sales", fmt.Sprintf("?backfill_id=%d", b.Id))
	require.EqualValues(t, 5, runs.TotalEntries)
	for i, sl := range slots {
		date := day(1, i+1)
		require.EqualValues(t, i+1, sl.SortOrdinal)
		require.Equal(t, date, sl.LogicalDate)
		require.Nil(t, sl.ExceptionReason)
		require.NotNil(t, sl.State)
		require.Equal(t, api.DagRunState("queued"), *sl.State)
		require.Equal(t, "backfill__"+ts(date), str(sl.RunId))

		r := runs.DagRuns[i]
		require.Equal(t, *sl.DagRunId, r.Id)
		require.Equal(t, *sl.RunId, r.RunId)
		require.Equal(t, date, r.LogicalDate)
		require.Equal(t, date, r.DataIntervalStart)
		require.Equal(t, date.AddDate(0, 0, 1), r.DataIntervalEnd)
		require.Equal(t, api.DagRunState("queued"), r.State)
		require.Equal(t, api.RunType("backfill"), r.RunType)
		require.NotNil(t, r.BackfillId)
		require.Equal(t, b.Id, *r.BackfillId)
		require.EqualValues(t, 1, r.Attempt)
		require.Nil(t, r.Conf)
		require.Nil(t, r.WorkerId)
		require.Nil(t, r.StartDate)
		require.Nil(t, r.EndDate)
		require.Nil(t, r.LeaseExpiresAt)
		require.NotNil(t, r.QueuedAt)
	}
}

func TestBackfillCreateCopiesConfAndOptionsToEveryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("sales", "@daily", "")
	conf := map[string]any{"full_refresh": true, "tables": []any{"a", "b"}, "n": float64(3)}
	b := e.CreateBackfill(backfillBody("sales", day(1, 1), day(1, 3),
		"dag_run_conf", conf, "max_active_runs", 4, "description", "rerun", "reprocess_behavior", "failed"))
	requireConf(t, conf, b.DagRunConf)
	require.EqualValues(t, 4, b.MaxActiveRuns)
	require.Equal(t, "rerun", str(b.Description))
	require.Equal(t, api.ReprocessBehavior("failed"), b.ReprocessBehavior)
	runs := e.ListRuns("sales", "")
	require.Len(t, runs.DagRuns, 3)
	for _, r := range runs.DagRuns {
		requireConf(t, conf, r.Conf)
	}
}

func TestBackfillCreateRunBackwardsNumbersNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("sales", day(1, 1), day(1, 4), "run_backwards", true)
	require.True(t, b.RunBackwards)
	slots := e.Slots(b.Id)
	require.Len(t, slots, 4)
	for i, sl := range slots {
		require.EqualValues(t, i+1, sl.SortOrdinal)
		require.Equal(t, day(1, 4-i), sl.LogicalDate, "ordinal %d", i+1)
	}
	// The descending listing is the ascending one reversed.
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/dag_runs?order_by=-sort_ordinal", b.Id), nil)
	require.Equal(t, http.StatusOK, res.Status)
	var desc api.BackfillDagRunCollection
	res.Decode(t, &desc)
	require.Len(t, desc.BackfillDagRuns, 4)
	require.Equal(t, day(1, 1), desc.BackfillDagRuns[0].LogicalDate)
	require.EqualValues(t, 4, desc.BackfillDagRuns[0].SortOrdinal)

	// Claims hand them out in sort order: newest first.
	claimed := e.ClaimN(2, "w", 2)
	require.Equal(t, day(1, 4), claimed[0].LogicalDate)
	require.Equal(t, day(1, 3), claimed[1].LogicalDate)
}

func TestBackfillCreateNewYorkDailyAcrossSpringForward(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ny_daily", "@daily", "America/New_York")
	ny := location(t, "America/New_York")
	from := time.Date(2024, 3, 8, 0, 0, 0, 0, ny)
	to := time.Date(2024, 3, 12, 0, 0, 0, 0, ny)
	b := e.CreateBackfill(backfillBody("ny_daily", from, to))
	require.EqualValues(t, 5, b.Progress.Total)
	want := []time.Time{
		time.Date(2024, 3, 8, 5, 0, 0, 0, time.UTC),
		time.Date(2024, 3, 9, 5, 0, 0, 0, time.UTC),
		time.Date(2024, 3, 10, 5, 0, 0, 0, time.UTC), // midnight EST; the change is at 02:00
		time.Date(2024, 3, 11, 4, 0, 0, 0, time.UTC), // midnight EDT
		time.Date(2024, 3, 12, 4, 0, 0, 0, time.UTC),
	}
	slots := e.Slots(b.Id)
	require.Len(t, slots, len(want))
	for i, sl := range slots {
		require.Equal(t, want[i], sl.LogicalDate, "slot %d", i+1)
	}
	runs := e.ListRuns("ny_daily", "")
	require.Len(t, runs.DagRuns, 5)
	for i, r := range runs.DagRuns {
		require.Equal(t, want[i], r.LogicalDate)
		if i+1 < len(want) {
			require.Equal(t, want[i+1], r.DataIntervalEnd, "interval of %s", r.RunId)
		}
	}
	// The short day is 23 hours long.
	require.Equal(t, 23*time.Hour, runs.DagRuns[2].DataIntervalEnd.Sub(runs.DagRuns[2].DataIntervalStart))
	require.Equal(t, "backfill__2024-03-11T04:00:00Z", runs.DagRuns[3].RunId)
}

func TestBackfillCreateNewYorkNonexistentWallTimeTakenAfterShift(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ny_0230", "30 2 * * *", "America/New_York")
	ny := location(t, "America/New_York")
	from := time.Date(2024, 3, 9, 0, 0, 0, 0, ny)
	to := time.Date(2024, 3, 11, 23, 59, 0, 0, ny)
	dry, _ := e.DryRun(backfillBody("ny_0230", from, to))
	want := []time.Time{
		time.Date(2024, 3, 9, 7, 30, 0, 0, time.UTC),  // 02:30 EST
		time.Date(2024, 3, 10, 7, 30, 0, 0, time.UTC), // 02:30 does not exist: 03:30 EDT
		time.Date(2024, 3, 11, 6, 30, 0, 0, time.UTC), // 02:30 EDT
	}
	require.EqualValues(t, 3, dry.TotalEntries)
	for i, r := range dry.Runs {
		require.Equal(t, want[i], r.LogicalDate, "slot %d", i+1)
	}
	b := e.CreateBackfill(backfillBody("ny_0230", from, to))
	slots := e.Slots(b.Id)
	require.Len(t, slots, 3)
	for i, sl := range slots {
		require.Equal(t, want[i], sl.LogicalDate, "slot %d", i+1)
	}
}

func TestBackfillCreateHourlyMonthHas745Slots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("hourly", "@hourly", "")
	from := day(1, 1)
	to := time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)
	b := e.CreateBackfill(backfillBody("hourly", from, to))
	require.EqualValues(t, 745, b.Progress.Total)
	require.EqualValues(t, 745, b.Progress.Queued)
	slots := e.Slots(b.Id)
	require.Len(t, slots, 745)
	for i, sl := range slots {
		require.EqualValues(t, i+1, sl.SortOrdinal)
		require.Equal(t, from.Add(time.Duration(i)*time.Hour), sl.LogicalDate)
	}
	require.Equal(t, 745, e.Count(`SELECT count(*) FROM dag_runs WHERE backfill_id = $1`, b.Id))
}

// reprocessFixture sets up runs of DAG "rp" (@daily UTC) for January 2..6; the 1st and
// 7th have none:
//
//	2 success, 3 failed (after an expired lease, so at attempt 2), 4 canceled,
//	5 queued, 6 running.
//
// Every manual run has conf {"orig": true}.
func reprocessFixture(t testing.TB, e *env) map[int]api.DagRun {
	t.Helper()
	e.PutDag("rp", "@daily", "")
	orig := map[string]any{"orig": true}
	runs := map[int]api.DagRun{}

	// The 3rd: claimed, lease expired (attempt 2), then marked failed.
	r3 := e.CreateManualRun("rp", day(1, 3), orig)
	claimed := e.ClaimN(1, "w-expire", 1)
	require.Equal(t, r3.Id, claimed[0].Id)
	e.Clock.Advance(301 * time.Second)
	e.SweepOnce()
	r3 = e.GetRun("rp", r3.RunId)
	require.Equal(t, api.DagRunState("queued"), r3.State)
	require.EqualValues(t, 2, r3.Attempt)
	runs[3] = e.MarkRun("rp", r3.RunId, "failed")

	r2 := e.CreateManualRun("rp", day(1, 2), orig)
	runs[2] = e.MarkRun("rp", r2.RunId, "success")
	r4 := e.CreateManualRun("rp", day(1, 4), orig)
	runs[4] = e.MarkRun("rp", r4.RunId, "canceled")

	r6 := e.CreateManualRun("rp", day(1, 6), orig)
	claimed = e.ClaimN(1, "w-run", 1)
	require.Equal(t, r6.Id, claimed[0].Id)
	runs[6] = claimed[0]

	runs[5] = e.CreateManualRun("rp", day(1, 5), orig)
	return runs
}

func TestBackfillCreateReprocessBehaviors(t *testing.T) {
	t.Parallel()
	type slotWant struct {
		action string // create, reprocess, skip
		reason string
	}
	inFlight := slotWant{"skip", "in flight"}
	exists := slotWant{"skip", "already exists"}
	create := slotWant{"create", ""}
	reprocess := slotWant{"reprocess", ""}
	cases := []struct {
		behavior string
		conf     map[string]any // dag_run_conf; nil leaves reprocessed runs' conf alone
		want     [7]slotWant    // January 1..7
	}{
		{"none", nil, [7]slotWant{create, exists, exists, exists, inFlight, inFlight, create}},
		{"failed", nil, [7]slotWant{create, exists, reprocess, reprocess, inFlight, inFlight, create}},
		{"completed", map[string]any{"fresh": "yes"}, [7]slotWant{create, reprocess, reprocess, reprocess, inFlight, inFlight, create}},
	}
	for _, c := range cases {
		t.Run(c.behavior, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			before := reprocessFixture(t, e)
			body := backfillBody("rp", day(1, 1), day(1, 7), "reprocess_behavior", c.behavior)
			if c.conf != nil {
				body["dag_run_conf"] = c.conf
			}

			// The preview says what creation will do, and writes nothing.
			counts := e.TableCounts()
			dry, _ := e.DryRun(body)
			require.Equal(t, counts, e.TableCounts(), "a dry run writes nothing")
			require.EqualValues(t, 7, dry.TotalEntries)
			require.Len(t, dry.Runs, 7)
			for i, r := range dry.Runs {
				w := c.want[i]
				require.EqualValues(t, i+1, r.SortOrdinal)
				require.Equal(t, day(1, i+1), r.LogicalDate)
				require.Equal(t, api.DryRunAction(w.action), r.Action, "day %d", i+1)
				if w.reason == "" {
					require.Nil(t, r.ExceptionReason, "day %d", i+1)
				} else {
					require.Equal(t, w.reason, str(r.ExceptionReason), "day %d", i+1)
				}
			}

			b := e.CreateBackfill(body)
			var queued, skipped int64
			for _, w := range c.want {
				if w.action == "skip" {
					skipped++
				} else {
					queued++
				}
			}
			require.Equal(t, api.BackfillProgress{Total: 7, Queued: queued, Skipped: skipped}, b.Progress)
			require.Equal(t, api.BackfillState("running"), b.State)

			slots := e.Slots(b.Id)
			require.Len(t, slots, 7)
			for i, sl := range slots {
				w := c.want[i]
				d := i + 1
				require.EqualValues(t, d, sl.SortOrdinal)
				require.Equal(t, day(1, d), sl.LogicalDate)
				switch w.action {
				case "skip":
					require.Nil(t, sl.DagRunId, "day %d", d)
					require.Nil(t, sl.RunId, "day %d", d)
					require.Nil(t, sl.State, "day %d", d)
					require.Equal(t, w.reason, str(sl.ExceptionReason), "day %d", d)
					// The run is left exactly as it was.
					prev := before[d]
					now := e.GetRun("rp", prev.RunId)
					require.Equal(t, prev.State, now.State, "day %d", d)
					require.Equal(t, prev.BackfillId, now.BackfillId, "day %d", d)
					require.Equal(t, prev.Attempt, now.Attempt, "day %d", d)
					require.Equal(t, prev.Conf, now.Conf, "day %d", d)
				case "create":
					require.Nil(t, sl.ExceptionReason)
					require.Equal(t, "backfill__"+ts(day(1, d)), str(sl.RunId))
					r := e.GetRun("rp", *sl.RunId)
					require.Equal(t, api.RunType("backfill"), r.RunType)
					require.Equal(t, api.DagRunState("queued"), r.State)
					requireConf(t, c.conf, r.Conf)
					require.EqualValues(t, 1, r.Attempt)
				case "reprocess":
					prev := before[d]
					require.Nil(t, sl.ExceptionReason, "day %d", d)
					require.NotNil(t, sl.DagRunId, "day %d", d)
					require.Equal(t, prev.Id, *sl.DagRunId, "the same run is taken over, day %d", d)
					require.Equal(t, prev.RunId, str(sl.RunId), "day %d", d)
					require.Equal(t, api.DagRunState("queued"), *sl.State, "day %d", d)
					r := e.GetRun("rp", prev.RunId)
					require.Equal(t, api.DagRunState("queued"), r.State, "day %d", d)
					require.Equal(t, "manual__"+ts(day(1, d)), r.RunId, "run_id is kept, day %d", d)
					require.Equal(t, api.RunType("manual"), r.RunType, "a reprocessed manual run stays manual, day %d", d)
					require.NotNil(t, r.BackfillId, "day %d", d)
					require.Equal(t, b.Id, *r.BackfillId, "day %d", d)
					require.EqualValues(t, prev.Attempt+1, r.Attempt, "the attempt goes on from the run's last, day %d", d)
					require.Nil(t, r.WorkerId)
					require.Nil(t, r.EndDate)
					require.Nil(t, r.StartDate)
					require.Nil(t, r.LeaseExpiresAt)
					if c.conf != nil {
						requireConf(t, c.conf, r.Conf, "conf replaced, day %d", d)
					} else {
						require.Equal(t, prev.Conf, r.Conf, "conf kept when dag_run_conf is null, day %d", d)
					}
				}
			}
			// The in-flight runs stay outside the backfill.
			listed := e.ListRuns("rp", fmt.Sprintf("?backfill_id=%d", b.Id))
			require.EqualValues(t, queued, listed.TotalEntries)
		})
	}
}

func TestBackfillCreateHistoryOfTerminalBackfillStaysTrue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.DailyBackfill("hist", day(1, 1), day(1, 4))
	claimed := e.ClaimN(4, "w", 10)
	for _, r := range claimed {
		state := "success"
		if r.LogicalDate.Equal(day(1, 2)) {
			state = "failed"
		}
		e.Report(r, state)
	}
	e.SweepOnce()
	a = e.GetBackfill(a.Id)
	require.Equal(t, api.BackfillState("failed"), a.State)
	require.NotNil(t, a.CompletedAt)
	wantA := api.BackfillProgress{Total: 4, Success: 3, Failed: 1}
	require.Equal(t, wantA, a.Progress)
	slotsA := e.Slots(a.Id)

	b := e.CreateBackfill(backfillBody("hist", day(1, 1), day(1, 4), "reprocess_behavior", "completed"))
	require.Equal(t, api.BackfillProgress{Total: 4, Queued: 4}, b.Progress)

	// A's record does not change: its progress and slots show the states at takeover.
	require.Equal(t, a, e.GetBackfill(a.Id))
	require.Equal(t, slotsA, e.Slots(a.Id))
	for _, sl := range e.Slots(a.Id) {
		want := api.DagRunState("success")
		if sl.LogicalDate.Equal(day(1, 2)) {
			want = "failed"
		}
		require.Equal(t, want, *sl.State, "A's slot %d", sl.SortOrdinal)
	}
	slotsB := e.Slots(b.Id)
	require.Len(t, slotsB, 4)
	for i, sl := range slotsB {
		require.Equal(t, api.DagRunState("queued"), *sl.State)
		require.Equal(t, *slotsA[i].DagRunId, *sl.DagRunId, "B takes over A's run")
		require.Equal(t, *slotsA[i].RunId, *sl.RunId)
	}
	runs := e.ListRuns("hist", fmt.Sprintf("?backfill_id=%d", a.Id))
	require.EqualValues(t, 0, runs.TotalEntries, "every run now belongs to B")
	runs = e.ListRuns("hist", fmt.Sprintf("?backfill_id=%d", b.Id))
	require.EqualValues(t, 4, runs.TotalEntries)
	for _, r := range runs.DagRuns {
		require.Equal(t, api.RunType("backfill"), r.RunType)
		require.EqualValues(t, 2, r.Attempt, "each ran once in A")
	}

	// B runs to success; A still shows its old record.
	claimed = e.ClaimN(4, "w2", 10)
	for _, r := range claimed {
		e.Report(r, "success")
	}
	e.SweepOnce()
	b = e.GetBackfill(b.Id)
	require.Equal(t, api.BackfillState("succeeded"), b.State)
	require.Equal(t, api.BackfillProgress{Total: 4, Success: 4}, b.Progress)
	require.Equal(t, a, e.GetBackfill(a.Id))
	require.Equal(t, slotsA, e.Slots(a.Id))

	// A third backfill takes the runs over from B; B's record keeps 4 × success.
	slotsB = e.Slots(b.Id)
	c := e.CreateBackfill(backfillBody("hist", day(1, 1), day(1, 4), "reprocess_behavior", "completed"))
	require.EqualValues(t, 4, c.Progress.Queued)
	require.Equal(t, b, e.GetBackfill(b.Id))
	require.Equal(t, slotsB, e.Slots(b.Id))
	require.Equal(t, a, e.GetBackfill(a.Id))
	require.Equal(t, slotsA, e.Slots(a.Id))
}

func TestBackfillCreateAllSlotsSkippedIsBornSucceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("done", "@daily", "")
	e.SucceededManualRuns("done", days(1, 3)...)
	b := e.CreateBackfill(backfillBody("done", day(1, 1), day(1, 3)))
	require.Equal(t, api.BackfillState("succeeded"), b.State)
	require.NotNil(t, b.CompletedAt)
	require.Equal(t, e.Clock.Now(), *b.CompletedAt)
	require.Equal(t, api.BackfillProgress{Total: 3, Skipped: 3}, b.Progress)
	for _, sl := range e.Slots(b.Id) {
		require.Nil(t, sl.DagRunId)
		require.Nil(t, sl.RunId)
		require.Nil(t, sl.State)
		require.Equal(t, "already exists", str(sl.ExceptionReason))
	}
	// It does not hold the DAG: the next backfill is created.
	next := e.CreateBackfill(backfillBody("done", day(1, 1), day(1, 5)))
	require.Equal(t, api.BackfillState("running"), next.State)
	require.Equal(t, api.BackfillProgress{Total: 5, Queued: 2, Skipped: 3}, next.Progress)
}

func TestBackfillCreateAllSkippedStill409WhileAnotherIsActive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("busy", "@daily", "")
	e.SucceededManualRuns("busy", days(1, 3)...)
	active := e.CreateBackfill(backfillBody("busy", day(1, 10), day(1, 12)))
	counts := e.TableCounts()
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("busy", day(1, 1), day(1, 3)))
	p := requireProblem(t, res, http.StatusConflict, "backfill_already_running")
	require.NotNil(t, p.ActiveBackfillId)
	require.Equal(t, active.Id, *p.ActiveBackfillId)
	require.Equal(t, counts, e.TableCounts())

	// A paused or canceling backfill is active too.
	res = e.Do(http.MethodPut, fmt.Sprintf("/api/v1/backfills/%d/pause", active.Id), nil)
	require.Equal(t, http.StatusOK, res.Status)
	res = e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("busy", day(1, 20), day(1, 21)))
	p = requireProblem(t, res, http.StatusConflict, "backfill_already_running")
	require.Equal(t, active.Id, *p.ActiveBackfillId)
	require.Equal(t, counts, e.TableCounts())
}

func TestBackfillCreateRejectsImpossibleWindowsWith422AndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("win", "@daily", "")
	now := e.Clock.Now()
	cases := []struct {
		name string
		body map[string]any
		code string
	}{
		{"from after to", backfillBody("win", day(1, 5), day(1, 1)), "invalid_backfill"},
		{"from after to by a second", backfillBody("win", day(1, 1).Add(time.Second), day(1, 1)), "invalid_backfill"},
		{"both in the future", backfillBody("win", now.Add(time.Hour), now.Add(48*time.Hour)), "invalid_backfill"},
		{"from = to at a non-tick instant", backfillBody("win", day(1, 1).Add(12*time.Hour), day(1, 1).Add(12*time.Hour)), "no_runs_to_create"},
		{"window between two ticks", backfillBody("win", day(1, 1).Add(time.Hour), day(1, 1).Add(23*time.Hour)), "no_runs_to_create"},
		{"only tick has not ended", backfillBody("win", now.Truncate(24*time.Hour), now), "no_runs_to_create"},
	}
	before := e.TableCounts()
	for _, c := range cases {
		res := e.Do(http.MethodPost, "/api/v1/backfills", c.body)
		p := requireProblem(t, res, http.StatusUnprocessableEntity, c.code)
		require.NotEmpty(t, p.Detail, c.name)
		require.Equal(t, before, e.TableCounts(), c.name)
	}
	// The DAG is still free.
	e.CreateBackfill(backfillBody("win", day(1, 1), day(1, 2)))
}

func TestBackfillCreateFromPastToFutureTakesEndedTicksOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("edge", "@hourly", "")
	now := e.Clock.Now()
	from := now.Truncate(time.Hour).Add(-3 * time.Hour)
	b := e.CreateBackfill(backfillBody("edge", from, now.Add(24*time.Hour)))
	// Ticks from-3h, from-2h, from-1h have ended; the current hour's tick has not.
	slots := e.Slots(b.Id)
	require.Len(t, slots, 3)
	require.Equal(t, from, slots[0].LogicalDate)
	require.Equal(t, now.Truncate(time.Hour).Add(-time.Hour), slots[2].LogicalDate)
}

func TestBackfillCreateTooManyRunsAboveCapAndExactlyCapIsFine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMaxBackfillRuns(100))
	e.PutDag("cap", "@hourly", "")
	from := day(1, 1)
	before := e.TableCounts()
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("cap", from, from.Add(100*time.Hour)))
	requireProblem(t, res, http.StatusUnprocessableEntity, "too_many_runs")
	require.Equal(t, before, e.TableCounts())
	res = e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("cap", from, from.Add(100*time.Hour)))
	requireProblem(t, res, http.StatusUnprocessableEntity, "too_many_runs")

	dry, _ := e.DryRun(backfillBody("cap", from, from.Add(99*time.Hour)))
	require.EqualValues(t, 100, dry.TotalEntries)
	b := e.CreateBackfill(backfillBody("cap", from, from.Add(99*time.Hour)))
	require.EqualValues(t, 100, b.Progress.Total)
	require.EqualValues(t, 100, b.Progress.Queued)
}

func TestBackfillCreateUnknownDagIs404(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("ghost", day(1, 1), day(1, 3)))
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")
	require.Equal(t, map[string]int{"dags": 0, "dag_runs": 0, "backfills": 0, "backfill_dag_runs": 0, "idempotency_keys": 0}, e.TableCounts())
}

// ---- dry run ----

func TestBackfillDryRunEmptyWindowIs200WithNoEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("dry", "@daily", "")
	before := e.TableCounts()
	res := e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("dry", day(1, 1).Add(time.Hour), day(1, 1).Add(2*time.Hour)))
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.Contains(t, string(res.Body), `"runs":[]`)
	var c api.DryRunCollection
	res.Decode(t, &c)
	require.EqualValues(t, 0, c.TotalEntries)
	require.Empty(t, c.Runs)
	require.Equal(t, before, e.TableCounts())
}

func TestBackfillDryRunErrorsOfCreateApplyButNever409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("dry", "@daily", "")
	res := e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("dry", day(1, 5), day(1, 1)))
	requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_backfill")
	now := e.Clock.Now()
	res = e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("dry", now.Add(time.Hour), now.Add(2*time.Hour)))
	requireProblem(t, res, http.StatusUnprocessableEntity, "invalid_backfill")
	res = e.Do(http.MethodPost, "/api/v1/backfills/dry_run", backfillBody("ghost", day(1, 1), day(1, 3)))
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")

	active := e.CreateBackfill(backfillBody("dry", day(1, 1), day(1, 3)))
	before := e.TableCounts()
	dry, _ := e.DryRun(backfillBody("dry", day(1, 1), day(1, 5)))
	require.Equal(t, before, e.TableCounts())
	require.EqualValues(t, 5, dry.TotalEntries)
	for i, r := range dry.Runs {
		if i < 3 {
			require.Equal(t, api.DryRunAction("skip"), r.Action)
			require.Equal(t, "in flight", str(r.ExceptionReason))
		} else {
			require.Equal(t, api.DryRunAction("create"), r.Action)
			require.Nil(t, r.ExceptionReason)
		}
	}
	// run_backwards orders the preview too.
	dry, _ = e.DryRun(backfillBody("dry", day(1, 1), day(1, 5), "run_backwards", true))
	require.Equal(t, day(1, 5), dry.Runs[0].LogicalDate)
	require.EqualValues(t, 1, dry.Runs[0].SortOrdinal)
	require.Equal(t, api.DryRunAction("create"), dry.Runs[0].Action)
	require.Equal(t, day(1, 1), dry.Runs[4].LogicalDate)
	require.Equal(t, before, e.TableCounts())
	require.Equal(t, active, e.GetBackfill(active.Id))
}

// ---- idempotency ----

func TestBackfillCreateIdempotencyKeyReplaysSameRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("idem", "@daily", "")
	const key = "key-1"
	first := e.Do(http.MethodPost, "/api/v1/backfills",
		`{"dag_id":"idem","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-03T00:00:00Z"}`, "Idempotency-Key", key)
	require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	var b api.Backfill
	first.Decode(t, &b)
	counts := e.TableCounts()
	require.Equal(t, 1, counts["idempotency_keys"])

	// The same request spelled differently: key order, whitespace, an offset, explicit defaults.
	spellings := []string{
		`{"dag_id":"idem","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-03T00:00:00Z"}`,
		"{\n  \"to_date\" : \"2024-01-03T00:00:00Z\",\n\t\"from_date\": \"2024-01-01T00:00:00Z\" ,  \"dag_id\":\"idem\"\n}",
		`{"dag_id":"idem","from_date":"2024-01-01T01:00:00+01:00","to_date":"2024-01-02T19:00:00-05:00"}`,
		`{"dag_id":"idem","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-03T00:00:00Z",
		  "run_backwards":false,"reprocess_behavior":"none","max_active_runs":10,"dag_run_conf":null}`,
	}
	// Move on a little so that "the backfill as it is now" differs from the creation answer.
	e.ClaimN(1, "w", 1)
	now := e.GetBackfill(b.Id)
	for _, body := range spellings {
		res := e.Do(http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", key)
		require.Equal(t, http.StatusCreated, res.Status, "body %s: %s", body, res.Body)
		require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"), body)
		require.Equal(t, fmt.Sprintf("/api/v1/backfills/%d", b.Id), res.Header.Get("Location"))
		var replay api.Backfill
		res.Decode(t, &replay)
		require.Equal(t, now, replay, "the backfill as it is now")
		require.Equal(t, counts, e.TableCounts(), "a replay creates nothing: %s", body)
	}

	// A different request under the same key.
	for _, body := range []map[string]any{
		backfillBody("idem", day(1, 1), day(1, 3), "max_active_runs", 5),
		backfillBody("idem", day(1, 1), day(1, 4)),
		backfillBody("idem", day(1, 1), day(1, 3), "dag_run_conf", map[string]any{}),
		backfillBody("idem", day(1, 1), day(1, 3), "description", "x"),
	} {
		res := e.Do(http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", key)
		requireProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
		require.Equal(t, counts, e.TableCounts())
	}

	// Without the key the same body is a new request: 409, the DAG is busy.
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("idem", day(1, 1), day(1, 3)))
	p := requireProblem(t, res, http.StatusConflict, "backfill_already_running")
	require.Equal(t, b.Id, *p.ActiveBackfillId)
}

func TestBackfillCreateFailedRequestStoresNothingUnderItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("k2", "@daily", "")
	e.PutDag("k3", "@daily", "")
	before := e.TableCounts()

	// 404, then the same key succeeds for a real DAG.
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("ghost", day(1, 1), day(1, 3)), "Idempotency-Key", "K2")
	requireProblem(t, res, http.StatusNotFound, "dag_not_found")
	require.Equal(t, before, e.TableCounts())
	res = e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("k2", day(1, 1), day(1, 3)), "Idempotency-Key", "K2")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Empty(t, res.Header.Get("Idempotent-Replayed"))

	// 422 (inverted window, then an empty one), then the same key succeeds.
	for _, bad := range []map[string]any{
		backfillBody("k3", day(1, 3), day(1, 1)),
		backfillBody("k3", day(1, 1).Add(time.Hour), day(1, 1).Add(2*time.Hour)),
	} {
		mid := e.TableCounts()
		res = e.Do(http.MethodPost, "/api/v1/backfills", bad, "Idempotency-Key", "K3")
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, "body: %s", res.Body)
		require.Equal(t, mid, e.TableCounts())
	}
	// 409 stores nothing either.
	mid := e.TableCounts()
	res = e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("k2", day(1, 5), day(1, 6)), "Idempotency-Key", "K3")
	requireProblem(t, res, http.StatusConflict, "backfill_already_running")
	require.Equal(t, mid, e.TableCounts())

	res = e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("k3", day(1, 1), day(1, 3)), "Idempotency-Key", "K3")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Empty(t, res.Header.Get("Idempotent-Replayed"))
	var keys []string
	require.NoError(t, e.DB.Select(&keys, `SELECT key FROM idempotency_keys ORDER BY key`))
	require.Equal(t, []string{"K2", "K3"}, keys)
}

func TestBackfillCreateConcurrentRequestsWithOneKeyCreateOneBackfill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ck", "@hourly", "")
	const n = 16
	body := backfillBody("ck", day(1, 1), day(1, 8))
	reqs := make([]request, n)
	for i := range reqs {
		reqs[i] = createRequest(body, "Idempotency-Key", "same-key")
	}
	ids := map[int64]int{}
	replayed := 0
	for _, res := range e.DoTogether(reqs...) {
		require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
		var b api.Backfill
		res.Decode(t, &b)
		ids[b.Id]++
		if res.Header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	require.Len(t, ids, 1, "every answer names the same backfill")
	require.Equal(t, n-1, replayed, "exactly one request created it")
	counts := e.TableCounts()
	require.Equal(t, 1, counts["backfills"])
	require.Equal(t, 1, counts["idempotency_keys"])
	require.Equal(t, 7*24+1, counts["dag_runs"])
	require.Equal(t, 7*24+1, counts["backfill_dag_runs"])
}

// ---- a failure in the middle of the creating transaction ----

func TestBackfillCreateFailureMidTransactionLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("mid", "@daily", "")
	before := e.TableCounts()
	// A real constraint of this test's own database that only the 5th slot row breaks.
	_, err := e.DB.Exec(`ALTER TABLE backfill_dag_runs ADD CONSTRAINT test_fail_last CHECK (sort_ordinal < 5)`)
	require.NoError(t, err)

	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("mid", day(1, 1), day(1, 5)), "Idempotency-Key", "mid-key")
	p := requireProblem(t, res, http.StatusInternalServerError, "internal")
	for _, leak := range []string{"test_fail_last", "constraint", "violates", "INSERT", "sort_ordinal", "backfill_dag_runs", "pq:", "SQLSTATE"} {
		require.NotContains(t, string(res.Body), leak, "a 5xx never carries internal error text")
	}
	require.NotEmpty(t, p.Detail)
	require.Equal(t, before, e.TableCounts(), "no backfill, slot, run or key survives")

	// The DAG is not blocked by an orphan, and the key was not stored.
	_, err = e.DB.Exec(`ALTER TABLE backfill_dag_runs DROP CONSTRAINT test_fail_last`)
	require.NoError(t, err)
	res = e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("mid", day(1, 1), day(1, 5)), "Idempotency-Key", "mid-key")
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Empty(t, res.Header.Get("Idempotent-Replayed"))
	var b api.Backfill
	res.Decode(t, &b)
	require.Equal(t, api.BackfillProgress{Total: 5, Queued: 5}, b.Progress)
	after := e.TableCounts()
	require.Equal(t, 1, after["backfills"])
	require.Equal(t, 5, after["dag_runs"])
	require.Equal(t, 5, after["backfill_dag_runs"])
	require.Equal(t, 1, after["idempotency_keys"])
}

// ---- 100,000 runs in one request ----

func TestBackfillCreateHundredThousandRunsInOneRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("minutely", "* * * * *", "")
	e.PutDag("minutely_over", "* * * * *", "")
	from := day(1, 1)

	// One slot over the default cap: 422 and nothing written.
	before := e.TableCounts()
	start := time.Now()
	res := e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("minutely_over", from, from.Add(100_000*time.Minute)))
	t.Logf("POST of 100,001 slots answered %d in %s", res.Status, time.Since(start))
	requireProblem(t, res, http.StatusUnprocessableEntity, "too_many_runs")
	require.Equal(t, before, e.TableCounts())

	start = time.Now()
	res = e.Do(http.MethodPost, "/api/v1/backfills", backfillBody("minutely", from, from.Add(99_999*time.Minute)))
	elapsed := time.Since(start)
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	t.Logf("POST creating 100,000 runs took %s", elapsed)
	var b api.Backfill
	res.Decode(t, &b)
	require.Equal(t, api.BackfillProgress{Total: 100_000, Queued: 100_000}, b.Progress)

	got := e.GetBackfill(b.Id)
	require.EqualValues(t, 100_000, got.Progress.Total)
	require.EqualValues(t, 100_000, got.Progress.Queued)
	var runs, slots, minOrd, maxOrd int
	require.NoError(t, e.DB.Get(&runs, `SELECT count(*) FROM dag_runs WHERE backfill_id = $1 AND state = 'queued'`, b.Id))
	require.NoError(t, e.DB.Get(&slots, `SELECT count(*) FROM backfill_dag_runs WHERE backfill_id = $1`, b.Id))
	require.NoError(t, e.DB.QueryRow(`SELECT min(sort_ordinal), max(sort_ordinal) FROM backfill_dag_runs WHERE backfill_id = $1`, b.Id).Scan(&minOrd, &maxOrd))
	require.Equal(t, 100_000, runs)
	require.Equal(t, 100_000, slots)
	require.Equal(t, 1, minOrd)
	require.Equal(t, 100_000, maxOrd)

	// The last page of the slot listing ends at the last minute.
	res = e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/dag_runs?order_by=-sort_ordinal&limit=1", b.Id), nil)
	require.Equal(t, http.StatusOK, res.Status)
	var page api.BackfillDagRunCollection
	res.Decode(t, &page)
	require.EqualValues(t, 100_000, page.TotalEntries)
	require.Equal(t, from.Add(99_999*time.Minute), page.BackfillDagRuns[0].LogicalDate)
	require.True(t, strings.HasPrefix(str(page.BackfillDagRuns[0].RunId), "backfill__2024-03-10T"))
}

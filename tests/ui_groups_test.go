package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// memberRowsJS reads the group page's member table in the order shown: DAG, depth, blocked.
const memberRowsJS = `[...document.querySelectorAll("#members tr")].map((r) =>
	[r.dataset.dag, r.querySelector(".depth").textContent, r.querySelector(".blocked").textContent])`

// groupStateIs waits for the group page's heading to show state.
func groupStateIs(state string) string {
	return fmt.Sprintf(`document.querySelector("h2 .state") && document.querySelector("h2 .state").textContent === %q`, state)
}

// confirmGroupAction clicks the group's button named label, requires the question to contain
// want, and answers it: yes, or "Keep as is".
func confirmGroupAction(t *testing.T, b *browser, label, want string, yes bool) {
	t.Helper()
	b.do(t, chromedp.Click(chromedp.Search(fmt.Sprintf(`//div[@id="group-actions"]/button[text()=%q]`, label))),
		chromedp.WaitVisible(chromedp.CSS("#confirm-yes")))
	require.Contains(t, b.text(t, "#confirm-message"), want)
	answer := "#confirm-no"
	if yes {
		answer = "#confirm-yes"
	}
	b.do(t, chromedp.Click(chromedp.CSS(answer)))
	b.waitFor(t, `document.querySelector("#confirm") === null`)
}

// A group's page shows a → b → c by depth with each member's blocked runs, follows a success
// without a reload, and steers the whole group; each action asks first, and "Keep as is"
// does nothing. A member's own page links its group instead of offering the buttons its
// group owns (the API would answer 409 managed_by_group).
func TestConsoleGroupPageShowsMembersByDepthAndSteersTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	e.PutDagWith("c", "@daily", "upstreams", []any{up("b")})
	g := call[api.BackfillGroup](e, http.StatusCreated, http.MethodPost, groupsPath,
		map[string]any{"dag_ids": []string{"a"}, "from_date": ts(day(1, 1)), "to_date": ts(day(1, 3)),
			"include_downstream": "all", "reason": "DATA-7"}, "X-Actor", "dana")
	require.Len(t, g.Members, 3)
	require.Equal(t, int64(6), g.Progress.Blocked, "b and c wait, day by day")
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/groups/%d", e.URL, g.Id)))
	b.waitFor(t, `document.querySelectorAll("#members tr").length === 3`)
	require.Equal(t, [][]string{{"a", "0", "0"}, {"b", "1", "3"}, {"c", "2", "3"}}, eval[[][]string](t, b, memberRowsJS),
		"the members by depth, each with its blocked runs")
	for _, m := range g.Members {
		require.Equal(t, fmt.Sprintf("#/backfills/%d", m.BackfillId),
			eval[string](t, b, fmt.Sprintf(`document.querySelector('#members tr[data-dag=%q] a.member-link').getAttribute("href")`, m.DagId)))
	}
	require.Equal(t, 3, eval[int](t, b, `document.querySelectorAll('#members [role="progressbar"]').length`))
	require.Contains(t, b.text(t, `#members tr[data-dag="c"] .progress`), "0/3 done")
	require.Contains(t, b.text(t, `#members tr[data-dag="c"] .progress`), "queued 3 (blocked 3)")
	fields := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll("#group-fields dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
	require.Equal(t, "a + downstream (all)", fields["Targets"])
	require.Equal(t, "dana", fields["Created by"])
	require.Equal(t, "DATA-7", fields["Reason"])
	require.Equal(t, "6 run-to-run", fields["Dependencies"])

	// a's first day succeeds: b's first day is no longer blocked, and the page follows.
	eval[bool](t, b, `window.noReload = true`)
	run := e.ClaimN(1, "w", 1)[0]
	require.Equal(t, "a", run.DagId, "claims prefer the top of the graph")
	e.Report(run, "success")
	b.waitFor(t, `document.querySelector('#members tr[data-dag="b"] .blocked').textContent === "2"`)
	require.Equal(t, [][]string{{"a", "0", "0"}, {"b", "1", "2"}, {"c", "2", "3"}}, eval[[][]string](t, b, memberRowsJS))
	require.Contains(t, b.text(t, `#members tr[data-dag="a"] .progress`), "1/3 done")
	require.True(t, eval[bool](t, b, `window.noReload === true`), "the page updated in place")

	// Pause asks first, naming the members it pauses.
	confirmGroupAction(t, b, "Pause", fmt.Sprintf("Pause group %d and its 3 running member backfills?", g.Id), true)
	b.waitFor(t, groupStateIs("paused"))
	got := e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStatePaused, got.State)
	for _, m := range got.Members {
		require.Equal(t, api.BackfillStatePaused, m.State, m.DagId)
	}
	require.True(t, eval[bool](t, b, `[...document.querySelectorAll("#group-actions button")].every((x) => x.disabled === (x.textContent !== "Unpause" && x.textContent !== "Cancel"))`),
		"a paused group can be unpaused or canceled, not paused")

	// "Keep as is" cancels nothing.
	confirmGroupAction(t, b, "Cancel", fmt.Sprintf("Cancel 8 runs of group %d (3 member backfills)? 8 queued (5 of them blocked) become canceled now; 0 running finish first.", g.Id), false)
	require.Equal(t, api.BackfillStatePaused, e.GetGroup(g.Id).State)

	confirmGroupAction(t, b, "Unpause", fmt.Sprintf("Unpause group %d and its 3 paused member backfills? 3 queued runs can be claimed again; 5 blocked wait", g.Id), true)
	b.waitFor(t, groupStateIs("running"))
	require.Equal(t, api.BackfillStateRunning, e.GetGroup(g.Id).State)

	// A member's page says whose it is and leaves pause, unpause and cancel to the group.
	bMember := member(t, g, "b")
	requireProblem(t, e.Action(bMember.BackfillId, "pause"), http.StatusConflict, "managed_by_group")
	b.do(t, chromedp.Click(chromedp.CSS(`#members tr[data-dag="b"] a.member-link`)))
	b.waitFor(t, fmt.Sprintf(`document.querySelector("h2") && document.querySelector("h2").textContent.startsWith("Backfill #%d of b") && document.querySelectorAll("#grid .cell").length === 3`, bMember.BackfillId))
	require.Equal(t, fmt.Sprintf("Member of group #%d", g.Id), b.text(t, "#group-link"))
	require.Equal(t, fmt.Sprintf("#/groups/%d", g.Id), eval[string](t, b, `document.querySelector("#group-link").getAttribute("href")`))
	require.False(t, eval[bool](t, b, `document.querySelector("#managed-by-group").hidden`))
	require.Equal(t, []string{"Retry failed slots"},
		eval[[]string](t, b, `[...document.querySelectorAll("#view .actions button")].filter((x) => x.offsetParent !== null).map((x) => x.textContent)`),
		"the member's own pause, unpause and cancel are not offered")
	require.Contains(t, b.text(t, "#progress-text"), "queued 3 (blocked 2)")
	b.do(t, chromedp.Click(chromedp.CSS(`#managed-by-group a`)))
	b.waitFor(t, `document.querySelectorAll("#members tr").length === 3`)

	confirmGroupAction(t, b, "Cancel", fmt.Sprintf("Cancel 8 runs of group %d (3 member backfills)? 8 queued (5 of them blocked)", g.Id), true)
	b.waitFor(t, groupStateIs("canceled"))
	got = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStateCanceled, got.State)
	for _, m := range got.Members {
		require.Equal(t, api.BackfillStateCanceled, m.State, m.DagId)
	}
	require.Zero(t, got.Progress.Blocked)
	require.True(t, eval[bool](t, b, `[...document.querySelectorAll("#group-actions button")].every((x) => x.disabled)`))
	require.Equal(t, [][]string{{"a", "0", "0"}, {"b", "1", "0"}, {"c", "2", "0"}}, eval[[][]string](t, b, memberRowsJS))

	// The list: the group with its targets, state, progress and who created it, and why.
	b.do(t, chromedp.Navigate(e.URL+"/ui#/groups"))
	row := fmt.Sprintf(`#groups tr[data-group="%d"]`, g.Id)
	b.waitFor(t, fmt.Sprintf(`document.querySelector('%s') !== null`, row))
	require.Contains(t, b.text(t, row+" .targets"), "a + downstream (all)")
	require.Equal(t, "canceled", b.text(t, row+" .state"))
	require.Contains(t, b.text(t, row+" .created-by"), "dana")
	require.Contains(t, b.text(t, row+" .created-by"), "DATA-7")
	require.Contains(t, b.text(t, row), "9/9 done · blocked 0")

	b.do(t, chromedp.Navigate(e.URL+"/ui#/groups/abc"))
	b.waitFor(t, viewIsOnlyTheError)
	require.Contains(t, b.text(t, "#error"), `No backfill group "abc"`)
	b.checkClean(t, e.URL)
}

// The roll-up pipeline of docs/GROUPS.md: hourly events → a daily roll-up → a weekly report
// that looks one week back. The dry run counts what docs/GROUPS.md says; an hour that fails
// cancels the day and the week that wait on it (upstream_failed, not charged to the failure
// budget) while the rest goes on; the group's pages show it (and are the doc's pictures).
func TestConsoleGroupRollUpShowsBlockedRunsAndUpstreamFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("events_hourly", "@hourly", "")
	e.PutDagWith("daily_rollup", "@daily", "upstreams", []any{up("events_hourly")})
	e.PutDagWith("weekly_report", "@weekly", "upstreams", []any{up("daily_rollup", "mapping", "overlap", "lookback", 1)})
	from, to := time.Date(2024, 3, 3, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 16, 23, 0, 0, 0, time.UTC)
	body := map[string]any{"dag_ids": []string{"events_hourly"}, "include_downstream": "all",
		"from_date": ts(from), "to_date": ts(to), "max_failed_runs": 2, "reason": "late events, INC-311"}

	dry := call[api.BackfillGroupDryRun](e, http.StatusOK, http.MethodPost, groupsPath+"/dry_run", body)
	type plan struct {
		dag          string
		depth, slots int
		blocked      int64
	}
	var plans []plan
	for _, m := range dry.Members {
		plans = append(plans, plan{m.DagId, int(m.Depth), len(m.Runs), m.Blocked})
	}
	require.Equal(t, []plan{{"events_hourly", 0, 336, 0}, {"daily_rollup", 1, 14, 14}, {"weekly_report", 2, 2, 2}}, plans)
	require.Equal(t, int64(14*24+7+14), dry.Dependencies, "a day waits for its 24 hours; a week for its 7 days and the 7 before")
	require.Equal(t, int64(16), dry.Blocked)

	g := call[api.BackfillGroup](e, http.StatusCreated, http.MethodPost, groupsPath, body, "X-Actor", "dana", "If-Match", `"`+dry.PlanHash+`"`)
	daily, weekly := member(t, g, "daily_rollup"), member(t, g, "weekly_report")

	// The first day's hours succeed: its roll-up can run, and runs.
	for h := range 24 {
		e.MarkRunSucceeded("events_hourly", from.Add(time.Duration(h)*time.Hour))
	}
	require.Len(t, e.ClaimDag("w1", "daily_rollup", 5), 1, "only the day whose hours all succeeded")
	require.Len(t, e.ClaimDag("w2", "events_hourly", 4), 4)
	// An hour of the second week fails: its day and the second week are canceled with it.
	failed := "backfill__2024-03-10T07:00:00Z"
	e.MarkRun("events_hourly", failed, "failed")
	note := "upstream_failed: events_hourly " + failed
	for _, c := range []struct {
		id   int64
		date string
	}{{daily.BackfillId, "2024-03-10"}, {weekly.BackfillId, "2024-03-10"}} {
		slots := e.Slots(c.id)
		var found bool
		for _, s := range slots {
			if s.LogicalDate.Format(time.DateOnly) == c.date {
				found = true
				require.Equal(t, api.DagRunStateCanceled, *s.State)
				require.Equal(t, note, str(s.Note))
			}
		}
		require.True(t, found, c.date)
	}
	g = e.GetGroup(g.Id)
	require.Equal(t, api.BackfillStateRunning, g.State, "1 failed run is under the budget of 2: the 2 cancels it caused are not charged")
	require.Equal(t, int64(1), g.Progress.Failed)
	require.Equal(t, int64(2), g.Progress.Canceled)
	require.Equal(t, int64(12), member(t, g, "daily_rollup").Progress.Blocked)
	require.Equal(t, int64(1), member(t, g, "weekly_report").Progress.Blocked, "the first week still waits for its days")

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/groups/%d", e.URL, g.Id)))
	b.waitFor(t, `document.querySelectorAll("#members tr").length === 3`)
	require.Equal(t, [][]string{{"events_hourly", "0", "0"}, {"daily_rollup", "1", "12"}, {"weekly_report", "2", "1"}}, eval[[][]string](t, b, memberRowsJS))
	require.Contains(t, b.text(t, `#members tr[data-dag="events_hourly"] .progress`), "success 24 · failed 1")
	require.Contains(t, b.text(t, `#members tr[data-dag="daily_rollup"] .progress`), "canceled 1 · skipped 0 · running 1 · queued 12 (blocked 12)")
	eval[bool](t, b, `window.scrollTo(0, 0), true`)
	b.screenshot(t, "ui-group")
	// Cancel's question, as docs/GROUPS.md quotes it; "Keep as is" leaves the group running.
	confirmGroupAction(t, b, "Cancel", fmt.Sprintf("Cancel 325 runs of group %d (3 member backfills)? 320 queued (13 of them blocked) become canceled now; 5 running finish first.", g.Id), false)
	require.Equal(t, api.BackfillStateRunning, e.GetGroup(g.Id).State)

	// The member's page: its group, and the canceled day's note in its slot.
	b.do(t, chromedp.Click(chromedp.CSS(`#members tr[data-dag="daily_rollup"] a.member-link`)))
	b.waitFor(t, `document.querySelectorAll("#grid .cell").length === 14 && document.querySelector("#group-link") !== null`)
	require.Contains(t, eval[string](t, b, `document.querySelector('#grid .cell[data-ordinal="8"]').title`), "note: "+note)
	// The group's link at the top of the picture, the progress and the grid under it.
	eval[bool](t, b, `document.querySelector("#group-link").scrollIntoView({block: "start"}), true`)
	b.screenshot(t, "ui-group-member")

	b.do(t, chromedp.Navigate(e.URL+"/ui#/groups"))
	b.waitFor(t, fmt.Sprintf(`document.querySelector('#groups tr[data-group="%d"]') !== null`, g.Id))
	require.Contains(t, b.text(t, "#groups-summary"), "Groups 1–1 of 1")
	b.screenshot(t, "ui-groups")
	b.checkClean(t, e.URL)
}

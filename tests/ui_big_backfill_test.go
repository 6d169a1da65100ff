package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// A 43,848-slot backfill (five years of hours) through the console, from the preview to a
// retry: the preview and the grid page their rows (no 43,848 DOM nodes), the grid reaches the
// last slot through the listing's cursors with each slot's attempt and note, a preview where
// every slot would be skipped says so and offers no Create, and Cancel and Retry ask first,
// naming the runs they touch; dismissing does nothing.
func TestConsoleShowsA43848SlotBackfillWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ui_big", "@hourly", "")
	b := newBrowser(t)

	preview := func() {
		b.do(t, chromedp.Navigate(e.URL+"/ui#/create"), chromedp.WaitVisible(chromedp.CSS("#create-form")))
		b.do(t,
			chromedp.SetValue(chromedp.CSS("#create-dag"), "ui_big"),
			chromedp.SetValue(chromedp.CSS("#create-from"), "2020-01-01T00:00"),
			chromedp.SetValue(chromedp.CSS("#create-to"), "2024-12-31T23:00"),
			chromedp.Click(chromedp.CSS("#preview-button")),
			chromedp.WaitVisible(chromedp.CSS("#create-button")))
	}

	// The preview: every slot counted, 100 of them drawn.
	preview()
	require.Equal(t, "43,848", b.text(t, "#count-total strong"))
	require.Equal(t, "43,848", b.text(t, "#count-create strong"))
	require.Equal(t, 100, eval[int](t, b, `document.querySelectorAll("#preview-rows tr").length`))
	require.Equal(t, "Slots 1–100 of 43,848", b.text(t, "#preview-range"))
	require.Zero(t, eval[int](t, b, `document.querySelectorAll("#preview-warning").length`), "something would run")
	b.do(t, chromedp.Click(chromedp.CSS("#preview-next")))
	require.Equal(t, "Slots 101–200 of 43,848", b.text(t, "#preview-range"))
	require.Equal(t, "101", b.text(t, "#preview-rows tr:first-child td:first-child"))

	b.do(t, chromedp.Click(chromedp.CSS("#create-button")))
	b.waitFor(t, `location.hash.startsWith("#/backfills/") && document.querySelector("#grid-range") !== null`)
	var id int64
	_, err := fmt.Sscanf(eval[string](t, b, `location.hash`), "#/backfills/%d", &id)
	require.NoError(t, err)
	require.EqualValues(t, 43848, e.GetBackfill(id).Progress.Total)
	b.waitFor(t, `document.querySelector("#grid-range").textContent === "Slots 1–1,000 of 43,848"`)
	require.Equal(t, 1000, eval[int](t, b, `document.querySelectorAll("#grid .cell").length`))

	// A failure deep in the backfill, past anything a first read of 1,000 runs sees.
	var deep api.BackfillDagRunCollection
	res := e.Do(http.MethodGet, fmt.Sprintf("%s/dag_runs?limit=1&offset=43000", backfillPath(id)), nil)
	require.Equal(t, http.StatusOK, res.Status)
	res.Decode(t, &deep)
	require.EqualValues(t, 43001, deep.BackfillDagRuns[0].SortOrdinal)
	res = e.Do(http.MethodPatch, runPath("ui_big", *deep.BackfillDagRuns[0].RunId), map[string]any{"state": "failed", "note": "disk full on slot 43001"})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)

	// Page by page to the end; the grid never holds more than a page.
	for page := 1; page < 44; page++ {
		b.do(t, chromedp.Click(chromedp.CSS("#grid-next")))
		b.waitFor(t, fmt.Sprintf(`document.querySelector("#grid-range").textContent.startsWith("Slots %s–")`, thousands(page*1000+1)))
		require.LessOrEqual(t, eval[int](t, b, `document.querySelectorAll("#grid .cell").length`), 1000)
	}
	require.Equal(t, "Slots 43,001–43,848 of 43,848", b.text(t, "#grid-range"))
	require.Equal(t, 848, eval[int](t, b, `document.querySelectorAll("#grid .cell").length`))
	require.True(t, eval[bool](t, b, `document.querySelector("#grid-next").disabled`))
	tip := eval[string](t, b, `document.querySelector('#grid .cell[data-ordinal="43001"]').title`)
	require.Contains(t, tip, "state: failed")
	require.Contains(t, tip, "attempt: ")
	require.Contains(t, tip, "note: disk full on slot 43001")
	require.Contains(t, tip, "2024-11-26 16:00:00 UTC", "slot 43,001 is hour 43,000 after 2020-01-01")
	// The failure reached the failed-runs table live, as it reached the progress bar.
	b.waitFor(t, `document.querySelector("#failed-count").textContent.startsWith("1 failed run;")`)
	require.Equal(t, "disk full on slot 43001", b.text(t, "#failed-runs .note"))
	// The pager at the top of the picture, the grid's last page under it.
	eval[bool](t, b, `document.querySelector("#grid-pager").scrollIntoView({block: "start"}), true`)
	b.screenshot(t, "ui-grid")
	b.mu.Lock()
	for _, u := range b.requests {
		require.False(t, strings.Contains(u, "/dag_runs?") && strings.Contains(u, "offset="), "the console pages by cursor: %s", u)
	}
	b.mu.Unlock()

	b.checkClean(t, e.URL)

	// A second browser for the rest: one browser lives at most 3 minutes (newBrowser), and
	// on a busy machine the paging above can take a good part of that.
	b = newBrowser(t)

	// Previewing the same window again: every slot is in flight, so nothing would run.
	preview()
	require.Equal(t, "43,848", b.text(t, "#count-skip strong"))
	require.Contains(t, b.text(t, "#preview-warning"), "Nothing would run: all 43,848 slots are skipped (already existing: 1, in flight: 43,847)")
	require.True(t, eval[bool](t, b, `document.querySelector("#create-button").disabled`))

	// Cancel: dismissed, nothing happens; confirmed, the 43,847 queued runs are canceled.
	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, id)))
	b.waitFor(t, `document.querySelector("h2 .state") && document.querySelector("h2 .state").textContent === "running"`)
	b.do(t, chromedp.Click(chromedp.Search(`//button[text()="Cancel"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm-no")))
	require.Contains(t, b.text(t, "#confirm-message"), fmt.Sprintf("Cancel 43,847 runs of backfill %d?", id))
	b.screenshot(t, "ui-confirm")
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-no")))
	b.waitFor(t, `document.querySelector("#confirm") === null`)
	time.Sleep(500 * time.Millisecond)
	require.EqualValues(t, "running", e.GetBackfill(id).State, "dismissing cancels nothing")
	b.do(t, chromedp.Click(chromedp.Search(`//button[text()="Cancel"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")))
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(t, `document.querySelector("h2 .state").textContent === "canceled"`)
	require.EqualValues(t, 43847, e.GetBackfill(id).Progress.Canceled)

	// Once canceled the runs already exist: the preview names reprocess_behavior, and
	// following its hint (Reprocess: failed) makes a plan that runs them all again.
	preview()
	require.Contains(t, b.text(t, "#preview-warning"), "Nothing would run: all 43,848 slots are skipped (already existing: 43,848, in flight: 0)")
	require.Contains(t, b.text(t, "#preview-warning"), "reprocess_behavior")
	require.True(t, eval[bool](t, b, `document.querySelector("#create-button").disabled`))
	b.screenshot(t, "ui-preview-nothing")
	b.do(t, chromedp.SetValue(chromedp.CSS("#create-reprocess"), "failed"), chromedp.Click(chromedp.CSS("#preview-button")))
	b.waitFor(t, `document.querySelector("#count-reprocess strong").textContent === "43,848"`)
	require.Zero(t, eval[int](t, b, `document.querySelectorAll("#preview-warning").length`))
	require.False(t, eval[bool](t, b, `document.querySelector("#create-button").disabled`))

	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, id)))
	b.waitFor(t, `document.querySelector("h2 .state") && document.querySelector("h2 .state").textContent === "canceled"`)

	// Retry: the same, for the 1 failed and 43,847 canceled slots.
	b.waitFor(t, `!document.querySelector("#view .actions button:nth-child(4)").disabled`)
	b.do(t, chromedp.Click(chromedp.Search(`//button[text()="Retry failed slots"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm-no")))
	require.Contains(t, b.text(t, "#confirm-message"), fmt.Sprintf("Retry 43,848 runs of backfill %d (1 failed, 43,847 canceled)", id))
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-no")))
	b.waitFor(t, `document.querySelector("#confirm") === null`)
	time.Sleep(500 * time.Millisecond)
	var list api.BackfillCollection
	e.Do(http.MethodGet, "/api/v1/backfills?dag_id=ui_big", nil).Decode(t, &list)
	require.EqualValues(t, 1, list.TotalEntries, "dismissing retries nothing")
	b.do(t, chromedp.Click(chromedp.Search(`//button[text()="Retry failed slots"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")))
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(t, fmt.Sprintf(`location.hash !== "#/backfills/%d" && document.querySelector("#grid-range") !== null && document.querySelector("#grid-range").textContent.endsWith("of 43,848")`, id))
	e.Do(http.MethodGet, "/api/v1/backfills?dag_id=ui_big", nil).Decode(t, &list)
	require.EqualValues(t, 2, list.TotalEntries)
	b.checkClean(t, e.URL)
}

// thousands writes n as the console does ("43,001").
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

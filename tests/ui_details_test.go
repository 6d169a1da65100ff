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

// Creating a backfill for a DAG that has an active one is refused with a banner that links
// that backfill; the window is typed in ISO 8601 UTC, and anything else is refused naming
// the field, whatever the browser's locale.
func TestConsoleCreateLinksTheActiveBackfillAndTakesISODates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ui_409", "@daily", "")
	active := e.DailyBackfill("ui_409", day(1, 1), day(1, 5))
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(e.URL+"/ui#/create"), chromedp.WaitVisible(chromedp.CSS("#create-form")))
	require.Equal(t, "text", eval[string](t, b, `document.querySelector("#create-from").type`), "no locale date picker")
	b.do(t,
		chromedp.SetValue(chromedp.CSS("#create-dag"), "ui_409"),
		chromedp.SetValue(chromedp.CSS("#create-from"), "02/01/2024"),
		chromedp.SetValue(chromedp.CSS("#create-to"), "2024-03-01T00:00:00Z"))
	// The form's own check would stop the submit before the console's: ask the console.
	eval[bool](t, b, `document.querySelector("#create-form").noValidate = true`)
	b.do(t, chromedp.Click(chromedp.CSS("#preview-button")))
	b.waitFor(t, `!document.querySelector("#error").hidden`)
	require.Contains(t, b.text(t, "#error"), `From: "02/01/2024" is not an ISO 8601 time in UTC`)

	b.do(t, chromedp.SetValue(chromedp.CSS("#create-from"), "2024-02-01T00:00:00Z"), chromedp.Click(chromedp.CSS("#preview-button")))
	b.waitFor(t, `document.querySelector("#create-button") !== null || !document.querySelector("#error").hidden`)
	if eval[bool](t, b, `document.querySelector("#create-button") !== null`) {
		require.Equal(t, "30", b.text(t, "#count-total strong"), "February 2024, midnight to midnight")
		b.do(t, chromedp.Click(chromedp.CSS("#create-button")))
	}
	b.waitFor(t, `document.querySelector("#error-link") !== null`)
	require.Contains(t, b.text(t, "#error"), fmt.Sprintf("already has an active backfill, #%d", active.Id))
	require.Equal(t, fmt.Sprintf("#/backfills/%d", active.Id), eval[string](t, b, `document.querySelector("#error-link").getAttribute("href")`))
	b.screenshot(t, "ui-409")
	b.do(t, chromedp.Click(chromedp.CSS("#error-link")))
	b.waitFor(t, fmt.Sprintf(`document.querySelector("h2") && document.querySelector("h2").textContent.startsWith("Backfill #%d of")`, active.Id))
	b.checkClean(t, e.URL)
}

// A backfill's page: an id that is not a number is an error, not the list; no failed run is
// one line; numbers are written one way; a backfill.updated event says what changed.
func TestConsoleBackfillPageDetails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ui_details", "@daily", "")
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	bf := call[api.Backfill](e, http.StatusCreated, http.MethodPost, "/api/v1/backfills",
		backfillBody("ui_details", from, from.AddDate(0, 0, 1199), "max_active_runs", 10, "code_ref", "git:5e1f", "reason", "DATA-42"),
		"X-Actor", "dana")
	require.EqualValues(t, 1200, bf.Progress.Total)
	e.PatchBackfill(bf.Id, map[string]any{"max_active_runs": 3, "max_failed_runs": 1500, "description": "nightly"})
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(e.URL+"/ui#/backfills/abc"))
	b.waitFor(t, viewIsOnlyTheError)
	require.Contains(t, b.text(t, "#error"), `No backfill "abc"`)

	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, bf.Id)))
	b.waitFor(t, `document.querySelector("#events tr[data-type='backfill.updated']") !== null && document.querySelector("#failed-count").textContent !== ""`)
	require.Equal(t, "No failed runs.", eval[string](t, b, `document.querySelector("#failed-section").innerText.trim()`),
		"one line: no header, no table, no pager")
	require.True(t, eval[bool](t, b, `document.querySelector("#progress-text").textContent.startsWith("0/1,200 done")`), b.text(t, "#progress-text"))
	fields := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll("#fields dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
	require.Equal(t, "1,500", fields["Max failed runs"])
	require.Equal(t, "git:5e1f", fields["Code"])
	require.Equal(t, "dana", fields["Created by"])
	require.Equal(t, "DATA-42", fields["Reason"])
	require.Equal(t, `max_active_runs: 10 → 3; max_failed_runs: no limit → 1,500; description: none → "nightly"`,
		b.text(t, "#events tr[data-type='backfill.updated'] .details"))
	b.checkClean(t, e.URL)
}

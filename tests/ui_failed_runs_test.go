package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The console's failed-runs table lists every failed run of a 2,000-run backfill with its
// note, page by page through the slot listing's cursors, and nothing else.
func TestConsoleListsEveryFailedRunWithItsNote(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ui_failed", "@daily", "")
	from := time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC)
	bf := e.CreateBackfill(backfillBody("ui_failed", from, from.AddDate(0, 0, 1999)))
	slots := e.Slots(bf.Id)
	require.Len(t, slots, 2000)
	want := map[string]string{}
	for i, s := range slots {
		if i%15 != 7 {
			continue
		}
		note := fmt.Sprintf("exit 1 on slot %d: <b>not markup</b>", s.SortOrdinal)
		res := e.Do(http.MethodPatch, runPath("ui_failed", *s.RunId), map[string]any{"state": "failed", "note": note})
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		want[*s.RunId] = note
	}
	require.Len(t, want, 133)

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, bf.Id)))
	b.waitFor(t, `document.querySelectorAll("#failed-runs tr").length > 0`)
	require.Contains(t, b.text(t, "#failed-count"), "133 failed runs")
	got := map[string]string{}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "the pages never end")
		rows := eval[[][]string](t, b, `[...document.querySelectorAll("#failed-runs tr")].map((tr) => [tr.dataset.runId, tr.querySelector(".note").textContent])`)
		for _, r := range rows {
			_, dup := got[r[0]]
			require.False(t, dup, "run %s listed twice", r[0])
			got[r[0]] = r[1]
		}
		if eval[bool](t, b, `document.querySelector("#failed-next").disabled`) {
			break
		}
		first := rows[0][0]
		b.do(t, chromedp.Click(chromedp.CSS("#failed-next")))
		b.waitFor(t, fmt.Sprintf(`document.querySelector("#failed-runs tr") && document.querySelector("#failed-runs tr").dataset.runId !== %q`, first))
	}
	require.Equal(t, want, got)
	require.Zero(t, eval[int](t, b, `document.querySelectorAll("#failed-runs b").length`), "a note is text, never markup")
	b.checkClean(t, e.URL)
}

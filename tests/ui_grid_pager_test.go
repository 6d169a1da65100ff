package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// gridAgrees is "ok" when the slot pager's label names exactly the cells under it, else what
// it shows instead.
const gridAgrees = `(() => {
  const label = document.querySelector("#grid-range").textContent;
  const cells = document.querySelectorAll("#grid .cell");
  const m = label.match(/^Slots ([\d,]+)–([\d,]+) of ([\d,]+)$/);
  if (!m || cells.length === 0) return "label " + label + " over " + cells.length + " cells";
  const n = (s) => Number(s.replaceAll(",", ""));
  const a = Number(cells[0].dataset.ordinal), z = Number(cells[cells.length - 1].dataset.ordinal);
  return n(m[1]) === a && n(m[2]) === z ? "ok" : label + " over cells #" + a + "–#" + z;
})()`

// runWorker claims and finishes up to most of the DAG's runs until stop is closed, so that the backfill's
// progress (and with it the grid's live refresh) moves while the person pages. It uses the
// assertion-free client: it runs outside the test goroutine.
func runWorker(e *env, dagID string, most int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for done := 0; done < most; {
			select {
			case <-stop:
				return
			default:
			}
			res, err := e.do(http.MethodPost, claimPath, map[string]any{"worker_id": "pager-worker", "limit": 20, "dag_id": dagID})
			if err != nil || res.Status != http.StatusOK {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			var claim api.ClaimResponse
			if json.Unmarshal(res.Body, &claim) != nil {
				continue
			}
			done += len(claim.Runs)
			for _, r := range claim.Runs {
				_, _ = e.do(http.MethodPatch, runPath(r.DagId, r.RunId), map[string]any{"state": "success", "worker_id": "pager-worker"})
			}
		}
	}()
	return &wg
}

// The slot pager of a running 40,000-slot backfill: a double click on Next moves one page
// with the label over the cells it names; clicks faster than the pages are read, while the
// grid refreshes live, never separate label and cells, and end on the last page with Next
// disabled; "jump" shows the first running or queued slot.
func TestConsoleSlotPagerKeepsLabelAndCellsTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ui_pager", "@hourly", "")
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	bf := e.CreateBackfill(backfillBody("ui_pager", from, from.Add(39_999*time.Hour), "max_active_runs", 20))
	require.EqualValues(t, 40_000, bf.Progress.Total)
	stop := make(chan struct{})
	// At most 3,000 runs: some slot past the first page is still running or queued at the end.
	worker := runWorker(e, "ui_pager", 3000, stop)
	stopWorker := sync.OnceFunc(func() { close(stop); worker.Wait() })
	t.Cleanup(stopWorker)

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, bf.Id)))
	b.waitFor(t, `document.querySelector("#grid-range") && document.querySelector("#grid-range").textContent === "Slots 1–1,000 of 40,000"`)
	require.True(t, eval[bool](t, b, `document.querySelector("#grid-prev").disabled`), "no page before the first")

	// A double click is one page on, whatever the second click met.
	// Two clicks in one task, as a double click lands before the first page is read.
	eval[bool](t, b, `document.querySelector("#grid-next").click(), document.querySelector("#grid-next").click(), true`)
	b.waitFor(t, `document.querySelector("#grid-range").textContent !== "Slots 1–1,000 of 40,000" && !document.querySelector("#grid-next").disabled`)
	require.Equal(t, "ok", eval[string](t, b, gridAgrees))
	require.Equal(t, "Slots 1,001–2,000 of 40,000", b.text(t, "#grid-range"))

	// Clicks every 100 ms, faster than a page is read on a busy machine, while the progress
	// stream refreshes the grid: at every look the label is the cells'.
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	clicks := 2
	for ctx.Err() == nil && !eval[bool](t, b, `document.querySelector("#grid-next").disabled && document.querySelector("#grid-range").textContent.startsWith("Slots 39,001")`) {
		eval[bool](t, b, `document.querySelector("#grid-next").click(), document.querySelector("#grid-next").click(), true`)
		require.Equal(t, "ok", eval[string](t, b, gridAgrees), "after %d clicks", clicks)
		clicks += 2
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, ctx.Err(), "the pager never reached the last page")
	require.Equal(t, "Slots 39,001–40,000 of 40,000", b.text(t, "#grid-range"))
	require.Equal(t, 1000, eval[int](t, b, `document.querySelectorAll("#grid .cell").length`))
	require.True(t, eval[bool](t, b, `document.querySelector("#grid-next").disabled`), "no page after the last")
	eval[bool](t, b, `document.querySelector("#grid-pager").scrollIntoView({block: "start"}), true`)
	b.screenshot(t, "ui-grid-end")
	// Refreshes after the last click change nothing of it.
	time.Sleep(1500 * time.Millisecond)
	require.Equal(t, "ok", eval[string](t, b, gridAgrees))
	require.Equal(t, "Slots 39,001–40,000 of 40,000", b.text(t, "#grid-range"))

	// Jump: the page of the first slot that is running or queued, that slot outlined.
	stopWorker()
	firstActive := 0
	for _, state := range []string{"running", "queued"} {
		var page api.BackfillDagRunCollection
		e.Do(http.MethodGet, fmt.Sprintf("%s/dag_runs?state=%s&limit=1", backfillPath(bf.Id), state), nil).Decode(t, &page)
		if len(page.BackfillDagRuns) > 0 && (firstActive == 0 || int(page.BackfillDagRuns[0].SortOrdinal) < firstActive) {
			firstActive = int(page.BackfillDagRuns[0].SortOrdinal)
		}
	}
	require.Greater(t, firstActive, 1000, "the worker moved past the first page")
	b.do(t, chromedp.Click(chromedp.CSS("#grid-active")))
	b.waitFor(t, fmt.Sprintf(`document.querySelector('#grid .cell.target[data-ordinal="%d"]') !== null`, firstActive))
	require.Equal(t, "ok", eval[string](t, b, gridAgrees))
	pageStart := (firstActive-1)/1000*1000 + 1
	require.Equal(t, fmt.Sprintf("Slots %s–%s of 40,000", thousands(pageStart), thousands(pageStart+999)), b.text(t, "#grid-range"))
	eval[bool](t, b, `document.querySelector("#grid-pager").scrollIntoView({block: "start"}), true`)
	b.screenshot(t, "ui-grid-jump")
	b.checkClean(t, e.URL)
}

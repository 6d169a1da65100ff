package tests

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// consoleSeconds is how the console writes a number of seconds (format.js, formatSeconds).
func consoleSeconds(s float64) string {
	n := int(math.Round(s))
	switch {
	case n < 60:
		return fmt.Sprintf("%ds", n)
	case n < 3600:
		return fmt.Sprintf("%dm%02ds", n/60, n%60)
	}
	return fmt.Sprintf("%dh%02dm", n/3600, (n%3600)/60)
}

// One ETA: the console's backfill page, `backfillctl watch` and GET /backfills/{id} show the
// same figure, the service's eta_seconds. The database's clock stands still after a steady
// executor has run, so the figure does not move while the three are read. The console's
// priority is edited where the limits are, and its create preview shows the dry run's
// estimate (or why there is none).
func TestConsoleWatchAndAPIShowOneETA(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	bf := e.DailyBackfill("ui_eta", day(1, 1), day(1, 1).AddDate(0, 0, 199), "max_active_runs", 2)
	x := &steadyExecutor{e: e, dag: "ui_eta", runTime: time.Second, tick: 500 * time.Millisecond, inFlight: map[string]stampedRun{}}
	x.runFor(6 * time.Second)
	eta := getETA(e, bf.Id)
	require.NotNil(t, eta, "the pace is known after 6 s of 2 runs a second")
	want := consoleSeconds(*eta)
	t.Logf("eta_seconds %.1f, shown as %s", *eta, want)

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, bf.Id)))
	b.waitFor(t, `document.querySelector("#progress-text") !== null && document.querySelector("#progress-text").textContent.includes("ETA")`)
	m := regexp.MustCompile(`ETA (\S+)`).FindStringSubmatch(b.text(t, "#progress-text"))
	require.NotNil(t, m, b.text(t, "#progress-text"))
	require.Equal(t, want, m[1], "the console shows the API's eta_seconds")

	r := runCLI(t, bin, e, "watch", fmt.Sprint(bf.Id), "--interval", "1s", "--timeout", "1500ms")
	require.Equal(t, 3, r.code, "a watch that times out\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	first := strings.Split(strings.TrimSpace(r.stdout), "\n")[0]
	m = regexp.MustCompile(`ETA (\S+)`).FindStringSubmatch(first)
	require.NotNil(t, m, first)
	require.Equal(t, want, m[1], "watch prints the API's eta_seconds")

	// Priority is edited with the limits, and the next claims follow it.
	fields := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll("#fields dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
	require.Equal(t, "0", fields["Priority"])
	b.do(t, chromedp.SetValue(chromedp.CSS("#patch-priority"), "7"), chromedp.Click(chromedp.CSS("#limits button[type=submit]")))
	b.waitFor(t, `[...document.querySelectorAll("#fields dt")].some((dt) => dt.textContent === "Priority" && dt.nextElementSibling.textContent === "7")`)
	require.Equal(t, int32(7), e.GetBackfill(bf.Id).Priority)

	// The create preview shows the dry run's estimate: from the 1 s runs above for this DAG,
	// and its basis for a DAG without history.
	e.PutDag("ui_eta_new", "@daily", "")
	for _, c := range []struct{ dag, basis string }{{"ui_eta", "last_successful_runs"}, {"ui_eta_new", "no_successful_runs"}} {
		from, to := "2025-01-01T00:00:00Z", "2025-01-10T00:00:00Z"
		var dry api.DryRunCollection
		res := e.Do(http.MethodPost, "/api/v1/backfills/dry_run", map[string]any{"dag_id": c.dag, "from_date": from, "to_date": to})
		require.Equal(t, http.StatusOK, res.Status)
		res.Decode(t, &dry)
		b.do(t, chromedp.Navigate(e.URL+"/ui#/create"), chromedp.WaitVisible(chromedp.CSS("#create-form")))
		b.do(t,
			chromedp.SetValue(chromedp.CSS("#create-dag"), c.dag),
			chromedp.SetValue(chromedp.CSS("#create-from"), from),
			chromedp.SetValue(chromedp.CSS("#create-to"), to),
			chromedp.Click(chromedp.CSS("#preview-button")))
		b.waitFor(t, fmt.Sprintf(`document.querySelector("#preview-estimate") !== null && document.querySelector("#preview-estimate").dataset.basis === %q`, c.basis))
		require.Equal(t, c.basis, string(dry.EstimateBasis))
		if dry.Estimate == nil {
			require.Contains(t, b.text(t, "#preview-estimate"), "no successful run")
			continue
		}
		require.InDelta(t, 10, dry.Estimate.RunnerSeconds, 0.01, "10 runs of 1 s")
		require.Equal(t, fmt.Sprint(dry.Estimate.RunnerSeconds), eval[string](t, b, `document.querySelector("#preview-estimate").dataset.runnerSeconds`))
		require.Equal(t, fmt.Sprint(dry.Estimate.WallClockSeconds), eval[string](t, b, `document.querySelector("#preview-estimate").dataset.wallClockSeconds`))
		require.Contains(t, b.text(t, "#preview-estimate"), "10s of runner time")
	}
	b.checkClean(t, e.URL)
}

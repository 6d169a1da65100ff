package tests

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// viewIsOnlyTheError: the banner is shown and nothing of a page is left under it (no
// figures of another backfill, no button that would act on it).
const viewIsOnlyTheError = `!document.querySelector("#error").hidden && document.querySelector("#view").childElementCount === 0`

// A backfill that cannot be loaded (404, or no network) clears the page it replaces.
func TestConsoleErrorClearsThePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.DailyBackfill("ui_err_a", day(1, 1), day(1, 5))
	second := e.DailyBackfill("ui_err_b", day(1, 1), day(1, 5))
	b := newBrowser(t)

	shown := func(id int64) {
		b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, id)))
		b.waitFor(t, fmt.Sprintf(`document.querySelector("h2") && document.querySelector("h2").textContent.startsWith("Backfill #%d of") && document.querySelectorAll("#grid .cell").length === 5`, id))
		require.Positive(t, eval[int](t, b, `document.querySelectorAll("#view button:not([disabled])").length`))
	}

	shown(first.Id)
	b.do(t, chromedp.Navigate(e.URL+"/ui#/backfills/999999"))
	b.waitFor(t, viewIsOnlyTheError)
	problem := e.Do(http.MethodGet, "/api/v1/backfills/999999", nil).Problem(t)
	require.Contains(t, b.text(t, "#error"), problem.Detail, "the problem's detail is shown")
	require.Zero(t, eval[int](t, b, `document.querySelectorAll("#view button, #grid").length`))

	// The network fails every read of the next backfill (the browser answers
	// ERR_INTERNET_DISCONNECTED for it, as with no network at all).
	shown(first.Id)
	// Paused requests: those of the second backfill fail as with no network; any other is
	// held until the test lets it go.
	held := make(chan fetch.RequestID, 16)
	require.NoError(t, chromedp.Listen(b.ctx, func(ev any) {
		p, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		if !strings.Contains(p.Request.URL, fmt.Sprintf("/backfills/%d", second.Id)) {
			held <- p.RequestID
			return
		}
		go func() {
			_, _ = chromedp.Call(b.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: p.RequestID, ErrorReason: network.ErrorReasonInternetDisconnected})
		}()
	}))
	_, err := chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: fmt.Sprintf("*/api/v1/backfills/%d*", second.Id)}}})
	require.NoError(t, err)
	b.do(t, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = "#/backfills/%d"`, second.Id)))
	b.waitFor(t, viewIsOnlyTheError)
	require.Contains(t, b.text(t, "#error"), "cannot be reached")
	_, err = chromedp.Call(b.ctx, fetch.Disable, cdp.Empty{})
	require.NoError(t, err)
	// Back online, the same address (a reload: the hash has not changed) shows it again.
	b.do(t, chromedp.Reload())
	shown(second.Id)
	require.True(t, eval[bool](t, b, `document.querySelector("#error").hidden`), "a page that loads clears the banner")

	// A slow backfill left for one that does not exist: when its answer comes at last, it
	// does not draw over the error that replaced it.
	_, err = chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: fmt.Sprintf("*/api/v1/backfills/%d", first.Id)}}})
	require.NoError(t, err)
	b.do(t, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = "#/backfills/%d"`, first.Id)))
	var slow fetch.RequestID
	select {
	case slow = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first backfill was never requested")
	}
	b.do(t, chromedp.Evaluate[chromedp.Void](`location.hash = "#/backfills/999999"`))
	b.waitFor(t, viewIsOnlyTheError)
	_, err = chromedp.Call(b.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: slow})
	require.NoError(t, err)
	_, err = chromedp.Call(b.ctx, fetch.Disable, cdp.Empty{})
	require.NoError(t, err)
	time.Sleep(time.Second) // time for the left page to draw, were it going to
	require.True(t, eval[bool](t, b, viewIsOnlyTheError), "the page left behind drew over the error")
	b.checkClean(t, e.URL)
}

// Timestamps are shown to the second, in UTC and in the browser's zone, never with the
// microseconds the API answers.
func TestConsoleShowsTimesToTheSecondInUTCAndLocal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bf := e.DailyBackfill("ui_times", day(1, 1), day(1, 5))
	b := newBrowser(t)
	_, err := chromedp.Call(b.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"})
	require.NoError(t, err)

	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, bf.Id)))
	b.waitFor(t, `document.querySelectorAll("#grid .cell").length === 5 && document.querySelectorAll("#events tr").length > 0`)
	fields := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll("#fields dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
	require.Equal(t, "2024-01-01 00:00:00 UTC (05:30:00 local) → 2024-01-05 00:00:00 UTC (05:30:00 local)", fields["Window"])
	// Created: the local date is named when it is not the UTC one (Kolkata is 5:30 ahead).
	second := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d local\)$`)
	require.Regexp(t, second, fields["Created"])
	require.Regexp(t, second, b.text(t, "#events tr td:nth-child(3)"))
	require.Contains(t, eval[string](t, b, `document.querySelector("#grid .cell").title`), "#1 2024-01-01 00:00:00 UTC (05:30:00 local)")
	view := b.text(t, "#view")
	require.NotRegexp(t, `\d\d:\d\d:\d\d\.\d`, view, "no fractions of a second")
	require.NotContains(t, view, "T00:00:00", "no raw RFC 3339")
	b.checkClean(t, e.URL)
}

// A DAG is created from the console; the server's validation error is shown as the problem's
// detail, and replacing an existing DAG asks first.
func TestConsoleCreatesADag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ui_dag_existing", "@daily", "")
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(e.URL+"/ui#/dags"), chromedp.WaitVisible(chromedp.CSS("#dag-form")))
	b.do(t,
		chromedp.SetValue(chromedp.CSS("#dag-id"), "ui_dag_new"),
		chromedp.SetValue(chromedp.CSS("#dag-schedule"), "every night"),
		chromedp.SetValue(chromedp.CSS("#dag-timezone"), "Europe/Amsterdam"),
		chromedp.Click(chromedp.CSS("#dag-save")))
	b.waitFor(t, `!document.querySelector("#error").hidden`)
	problem := e.Do(http.MethodPut, "/api/v1/dags/ui_dag_probe", map[string]any{
		"schedule": "every night", "timezone": "Europe/Amsterdam", "max_active_runs": 16, "is_paused": false,
	}).Problem(t)
	require.NotEmpty(t, problem.Detail)
	require.Contains(t, b.text(t, "#error"), problem.Detail)
	require.Equal(t, http.StatusNotFound, e.Do(http.MethodGet, "/api/v1/dags/ui_dag_new", nil).Status, "nothing was created")

	b.do(t,
		chromedp.SetValue(chromedp.CSS("#dag-schedule"), "0 2 * * *"),
		chromedp.SetValue(chromedp.CSS("#dag-max-active-runs"), "4"),
		chromedp.SetValue(chromedp.CSS("#dag-description"), "Nightly sales"),
		chromedp.SetValue(chromedp.CSS("#dag-upstreams"), "ui_dag_existing:all:2"),
		chromedp.Click(chromedp.CSS("#dag-depends-on-past")),
		chromedp.Click(chromedp.CSS("#dag-save")))
	b.waitFor(t, `document.querySelector('#dags tr[data-dag="ui_dag_new"]') !== null`)
	require.True(t, eval[bool](t, b, `document.querySelector("#error").hidden`))
	var dag api.Dag
	res := e.Do(http.MethodGet, "/api/v1/dags/ui_dag_new", nil)
	require.Equal(t, http.StatusOK, res.Status)
	res.Decode(t, &dag)
	require.Equal(t, "0 2 * * *", dag.Schedule)
	require.Equal(t, "Europe/Amsterdam", dag.Timezone)
	require.EqualValues(t, 4, dag.MaxActiveRuns)
	require.Equal(t, []api.DagUpstream{{DagId: "ui_dag_existing", Mapping: api.DependencyMappingAll, Lookback: 2}}, dag.Upstreams)
	require.True(t, dag.DependsOnPast)
	require.Equal(t, "ui_dag_existing:all:2 (and its past)", b.text(t, `#dags tr[data-dag="ui_dag_new"] td.upstreams`))
	require.Equal(t, "ui_dag_new", b.text(t, `#dags tr[data-dag="ui_dag_existing"] td.downstreams`))
	b.screenshot(t, "ui-dags")

	// Replacing a DAG with the upstreams left empty (the saved form is drawn anew, empty) keeps
	// them, and says so first.
	require.Empty(t, eval[string](t, b, `document.querySelector("#dag-upstreams").value`))
	b.do(t,
		chromedp.SetValue(chromedp.CSS("#dag-id"), "ui_dag_new"),
		chromedp.SetValue(chromedp.CSS("#dag-schedule"), "0 3 * * *"),
		chromedp.Click(chromedp.CSS("#dag-save")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-yes")))
	require.Contains(t, b.text(t, "#confirm-message"), "Its upstreams (ui_dag_existing:all:2) are kept.")
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(t, `document.querySelector('#dags tr[data-dag="ui_dag_new"] code')?.textContent === "0 3 * * *"`)
	res = e.Do(http.MethodGet, "/api/v1/dags/ui_dag_new", nil)
	res.Decode(t, &dag)
	require.Equal(t, "0 3 * * *", dag.Schedule)
	require.Len(t, dag.Upstreams, 1, "the replace kept the upstreams")

	// An existing DAG: dismissing the question leaves it as it was.
	b.do(t,
		chromedp.SetValue(chromedp.CSS("#dag-id"), "ui_dag_existing"),
		chromedp.SetValue(chromedp.CSS("#dag-schedule"), "@hourly"),
		chromedp.Click(chromedp.CSS("#dag-save")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-no")))
	require.Contains(t, b.text(t, "#confirm-message"), "ui_dag_existing exists")
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-no")))
	b.waitFor(t, `document.querySelector("#confirm") === null`)
	res = e.Do(http.MethodGet, "/api/v1/dags/ui_dag_existing", nil)
	res.Decode(t, &dag)
	require.Equal(t, "@daily", dag.Schedule)
	b.checkClean(t, e.URL)
}

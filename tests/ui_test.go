package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// browser is a headless Chromium page that records what a reviewer of the console cares
// about besides what it shows: every URL it requested and every error it logged.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	requests []string
	errors   []string
	// network is the page's recent requests with their answers, told when a wait times out:
	// a console that did not move is then seen to have waited, been refused, or never asked.
	network []string
}

// networkKept is how many of the page's latest network entries browser.network keeps.
const networkKept = 40

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: CI must install Debian's chromium package (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is missing; install Debian's chromium package (apt-get install -y chromium) to run this test", chromiumPath)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	// The whole browser lives at most this long: a stuck page fails the test, not CI.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
			b.note("%s → %s %s", ev.RequestID, ev.Request.Method, ev.Request.URL)
		case *network.EventResponseReceived:
			b.note("%s ← %d %s", ev.RequestID, ev.Response.Status, ev.Response.MimeType)
		case *network.EventLoadingFailed:
			b.note("%s ✗ %s canceled=%v", ev.RequestID, ev.ErrorText, ev.Canceled)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				b.errors = append(b.errors, fmt.Sprintf("console.error: %d args", len(ev.Args)))
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception: "+ev.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			// CSP violations arrive here. A 401 or 409 that the page asked for on purpose is
			// logged as a failed network load; that is not the page's error.
			if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
				b.errors = append(b.errors, fmt.Sprintf("%s: %s", ev.Entry.Source, ev.Entry.Text))
			}
		}
	}))
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	require.NoError(t, err)
	return b
}

// note keeps one network entry, stamped; b.mu is held.
func (b *browser) note(format string, args ...any) {
	b.network = append(b.network, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	if len(b.network) > networkKept {
		b.network = b.network[len(b.network)-networkKept:]
	}
}

func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(b.ctx, actions...))
}

// text reads the text of the first element matching a CSS selector, in one evaluation, so
// that a view re-rendering between finding the node and reading it cannot fail the read.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	quoted, err := json.Marshal(sel)
	require.NoError(t, err)
	return eval[string](t, b, `document.querySelector(`+string(quoted)+`).textContent`)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, js)
	return v
}

// waitFor polls a JavaScript condition until it is true.
func (b *browser) waitFor(t *testing.T, js string) {
	t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		b.mu.Lock()
		t.Logf("the page's latest requests, until %s:\n%s", time.Now().Format("15:04:05.000"), strings.Join(b.network, "\n"))
		b.mu.Unlock()
	}
	require.NoError(t, err, "waiting for %s", js)
}

// checkClean fails on any console error and on any request that left the origin.
func (b *browser) checkClean(t *testing.T, origin string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.errors, "the console logged errors")
	require.NotEmpty(t, b.requests)
	for _, u := range b.requests {
		// data: URLs (the browser's own date-picker icon) never reach a network.
		if strings.HasPrefix(u, "data:") {
			continue
		}
		require.True(t, strings.HasPrefix(u, origin+"/"), "a request left the origin: %s", u)
	}
}

// screenshot saves the viewport as docs/img/NAME.png when UPDATE_SCREENSHOTS is set (the
// README shows them), and checks either way that the page renders to a real image.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.Greater(t, len(png), 10_000, "a rendered page, not a blank one")
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "img", name+".png"), png, 0o644))
	}
}

func TestConsoleCreatesWatchesAndSteersABackfill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sweep := sweeper.New(e.Store, sweeper.Config{Interval: 200 * time.Millisecond})
	sweep.Start(context.Background())
	t.Cleanup(sweep.Stop)

	res, err := e.HTTP.Get(e.URL + "/ui")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	csp := res.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "script-src 'self';")
	require.Contains(t, csp, "connect-src 'self'")
	require.NotContains(t, csp, "unsafe-inline", "no inline script or style")
	require.NotContains(t, csp, "http", "no foreign origin")

	e.PutDag("ui_daily", "@daily", "")
	e.PutDag("ui_other", "@hourly", "Europe/Paris")
	b := newBrowser(t)

	// Create through the form: the preview counts what the dry run plans.
	b.do(t, chromedp.Navigate(e.URL+"/ui#/create"), chromedp.WaitVisible(chromedp.CSS("#create-form")))
	b.do(t,
		chromedp.SetValue(chromedp.CSS("#create-dag"), "ui_daily"),
		chromedp.SetValue(chromedp.CSS("#create-from"), "2024-01-01T00:00"),
		chromedp.SetValue(chromedp.CSS("#create-to"), "2024-01-05T00:00"),
		chromedp.SetValue(chromedp.CSS("#create-max-active-runs"), "2"),
		chromedp.Click(chromedp.CSS("#preview-button")),
		chromedp.WaitVisible(chromedp.CSS("#create-button")))
	require.Equal(t, "5", b.text(t, "#count-total strong"))
	require.Equal(t, "5", b.text(t, "#count-create strong"))
	require.Equal(t, "0", b.text(t, "#count-skip strong"))
	b.screenshot(t, "ui-create")

	b.do(t, chromedp.Click(chromedp.CSS("#create-button")))
	b.waitFor(t, `document.querySelectorAll('#grid .cell[data-state="queued"]').length === 5`)
	hash := eval[string](t, b, `location.hash`)
	var id int64
	_, err = fmt.Sscanf(hash, "#/backfills/%d", &id)
	require.NoError(t, err, hash)
	require.EqualValues(t, "running", e.GetBackfill(id).State, "the API has it too")

	// An executor works the runs; the page follows without a reload until succeeded.
	eval[bool](t, b, `window.noReload = true`)
	c, err := client.New(e.URL, "", client.WithHTTPClient(e.specHTTP(t)))
	require.NoError(t, err)
	execCtx, stopExec := context.WithCancel(context.Background())
	defer stopExec()
	go func() {
		_ = c.RunExecutor(execCtx, client.ExecutorConfig{WorkerID: "ui-worker", Limit: 1, IdleBackoff: 20 * time.Millisecond},
			func(ctx context.Context, run client.DagRun) error { time.Sleep(150 * time.Millisecond); return nil })
	}()
	b.waitFor(t, `document.querySelectorAll('#grid .cell[data-state="success"]').length >= 2`)
	b.waitFor(t, `document.querySelector('#progress-text').textContent.startsWith('5/5 done')`)
	b.waitFor(t, `document.querySelector('h2 .state').textContent === 'succeeded'`)
	require.True(t, eval[bool](t, b, `window.noReload === true`), "the page updated in place")
	require.EqualValues(t, "succeeded", e.GetBackfill(id).State)
	stopExec()
	b.screenshot(t, "ui-backfill")

	// Pause and cancel buttons on a backfill nobody works.
	other := e.CreateBackfill(backfillBody("ui_other", day(1, 1), day(1, 2)))
	b.do(t, chromedp.Navigate(fmt.Sprintf("%s/ui#/backfills/%d", e.URL, other.Id)))
	b.waitFor(t, `document.querySelectorAll('#grid .cell').length === 25`)
	b.do(t, chromedp.Click(chromedp.Search(`//button[text()="Pause"]`)))
	b.waitFor(t, `document.querySelector('h2 .state').textContent === 'paused'`)
	require.EqualValues(t, "paused", e.GetBackfill(other.Id).State)
	// Cancel asks first, naming the 25 queued runs it cancels.
	b.do(t, chromedp.Click(chromedp.Search(`//button[text()="Cancel"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")))
	require.Contains(t, b.text(t, "#confirm-message"), fmt.Sprintf("Cancel 25 runs of backfill %d?", other.Id))
	b.do(t, chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(t, `document.querySelector('h2 .state').textContent === 'canceled'`)
	require.EqualValues(t, "canceled", e.GetBackfill(other.Id).State)

	// The list, newest first, with progress bars.
	b.do(t, chromedp.Navigate(e.URL+"/ui#/backfills"))
	b.waitFor(t, `document.querySelector('h2').textContent === 'Backfills' && document.querySelectorAll('tbody tr').length === 2`)
	first := b.text(t, "tbody tr:first-child td:first-child")
	require.Equal(t, fmt.Sprintf("#%d", other.Id), first, "newest first")
	require.Equal(t, 2, eval[int](t, b, `document.querySelectorAll('tbody [role="progressbar"]').length`))
	b.screenshot(t, "ui-backfills")

	b.do(t, chromedp.Navigate(e.URL+"/ui#/dags"))
	b.waitFor(t, `document.querySelector('h2').textContent === 'DAGs' && document.querySelectorAll('tbody tr').length === 2`)
	require.Contains(t, b.text(t, "tbody"), "Europe/Paris")

	b.checkClean(t, e.URL)
}

func TestConsoleAsksForATokenAndShowsTheRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens("ui-token"))
	e.Token = "ui-token"
	e.PutDag("ui_token_dag", "@daily", "")
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(e.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS("#token-form")))
	require.Contains(t, b.text(t, "#token-reason"), "a valid bearer token is required", "the 401's detail is shown")

	b.do(t, chromedp.SendKeys(chromedp.CSS("#token-input"), "wrong"), chromedp.Click(chromedp.CSS("#token-form button")))
	b.waitFor(t, `document.querySelector('#token-reason').textContent.includes('was refused')`)
	require.Contains(t, b.text(t, "#token-reason"), "a valid bearer token is required")

	b.do(t, chromedp.SendKeys(chromedp.CSS("#token-input"), "ui-token"), chromedp.Click(chromedp.CSS("#token-form button")))
	b.waitFor(t, `document.querySelector('#token-form').hidden && document.querySelector('#filter-dag') !== null`)
	b.waitFor(t, `[...document.querySelectorAll('#filter-dag option')].some(o => o.value === 'ui_token_dag')`)
	require.Equal(t, "ui-token", eval[string](t, b, `sessionStorage.getItem('backfill.token')`),
		"kept for the tab only (sessionStorage)")

	// The 401s were answers the page asked for; anything else logged is an error.
	b.checkClean(t, e.URL)
}

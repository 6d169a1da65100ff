package tests

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The console's pools page shows each pool's slots, running and queued runs, and follows a
// claim without a reload.
func TestConsoleShowsPools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutPool("ui_pool", 2, http.StatusCreated)
	e.DailyBackfill("ui_pool_dag", day(1, 1), day(1, 5), "pool", "ui_pool")
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(e.URL+"/ui#/pools"), chromedp.WaitVisible(chromedp.CSS(`#pools tr[data-pool="ui_pool"]`)))
	row := `#pools tr[data-pool="ui_pool"] `
	require.Equal(t, "2", b.text(t, row+".slots"))
	require.Equal(t, "0", b.text(t, row+".running"))
	require.Equal(t, "5", b.text(t, row+".queued"))

	eval[bool](t, b, `window.noReload = true`)
	claimed := e.Claim("w", 5)
	require.Len(t, claimed, 2, "the pool bounds the claim")
	b.waitFor(t, `document.querySelector('#pools tr[data-pool="ui_pool"] .running').textContent === '2'`)
	require.Equal(t, "3", b.text(t, row+".queued"))
	require.True(t, eval[bool](t, b, `window.noReload === true`), "the page updated in place")
	require.Equal(t, "—", b.text(t, row+".rate"))

	// A pace shows, and so does the next start once it is used up.
	e.PutPoolRate("ui_pool", 2, 2, "minute", http.StatusOK)
	for _, r := range claimed {
		e.Report(r, "success")
	}
	require.Len(t, e.Claim("w", 5), 2)
	b.waitFor(t, `document.querySelector('#pools tr[data-pool="ui_pool"] .next-start').textContent.endsWith(' UTC')`)
	require.Equal(t, "2 per minute", b.text(t, row+".rate"))
	b.screenshot(t, "ui-pools")
}

package grafana_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/deploy/internal/exported"
	"github.com/stretchr/testify/require"
)

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// Every query of every panel parses as PromQL and names only metrics the service exports,
// with the suffixes a scrape shows (a histogram's _bucket, _sum and _count).
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	names, err := exported.Names()
	require.NoError(t, err)

	raw, err := os.ReadFile("backfill.json")
	require.NoError(t, err)
	var dash struct {
		Panels []panel `json:"panels"`
	}
	require.NoError(t, json.NewDecoder(bytes.NewReader(raw)).Decode(&dash))

	seen := map[string]bool{}
	var check func(ps []panel)
	check = func(ps []panel) {
		for _, p := range ps {
			check(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			for _, target := range p.Targets {
				metrics, err := exported.MetricsIn(target.Expr)
				require.NoError(t, err, p.Title)
				for _, m := range metrics {
					require.True(t, names[m], "panel %q names %s, which the service does not export", p.Title, m)
					seen[m] = true
				}
			}
		}
	}
	check(dash.Panels)

	// The panels the dashboard is for.
	for _, m := range []string{
		"backfill_admission_admitted_total", "backfill_admission_shed_total",
		"backfill_runs_claimed_total", "backfill_runs_unfinished", "backfill_backfills_active",
		"backfill_event_listener_lag_seconds_bucket", "backfill_webhook_deliveries_total",
	} {
		require.True(t, seen[m], "no panel shows %s", m)
	}
}

func TestExportedNamesIncludeHistogramSeries(t *testing.T) {
	names, err := exported.Names()
	require.NoError(t, err)
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		require.True(t, names["backfill_sweep_duration_seconds"+suffix], suffix)
	}
	require.False(t, names["backfill_sweep_duration_seconds"], "a histogram has no series of its own name")
	for name := range names {
		require.False(t, strings.HasPrefix(name, "#"), name)
	}
}

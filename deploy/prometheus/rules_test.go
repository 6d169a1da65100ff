package rules_test

import (
	"os"
	"testing"

	"github.com/backfillsvc/backfill/deploy/internal/exported"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// Every alert names only metrics the service exports (up aside, which Prometheus adds), and
// has a promtool case in which it fires: an alert that cannot fire is worse than none.
func TestEveryAlertNamesExportedMetricsAndHasAFiringTest(t *testing.T) {
	names, err := exported.Names()
	require.NoError(t, err)
	names["up"] = true

	var rules ruleFile
	readYAML(t, "alerts.yaml", &rules)
	var tests ruleTests
	readYAML(t, "alerts_test.yaml", &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}

	count := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			count++
			metrics, err := exported.MetricsIn(r.Expr)
			require.NoError(t, err, r.Alert)
			for _, m := range metrics {
				require.True(t, names[m], "alert %s names %s, which the service does not export", r.Alert, m)
			}
			require.True(t, fires[r.Alert], "alert %s has no test in alerts_test.yaml in which it fires", r.Alert)
		}
	}
	require.GreaterOrEqual(t, count, 10)
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	// Not strict: promtool checks the files whole; these structs read only what is checked here.
	require.NoError(t, yaml.Unmarshal(raw, v), path)
}

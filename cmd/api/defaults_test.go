package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docDefaults reads a configuration table of a Markdown file: variable → default as written.
func docDefaults(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| ([^|]+) \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = strings.Trim(strings.TrimSpace(m[2]), "`")
	}
	require.NotEmpty(t, out, "%s has no configuration table", path)
	return out
}

// TestDocsStateTheDefaultsConfigApplies holds the docs to config.go, the one place the service's
// defaults are written: every variable loadConfig reads is in OPERATIONS.md's table, and every
// default either table states is the one loadConfig applies.
func TestDocsStateTheDefaultsConfigApplies(t *testing.T) {
	asked := map[string]bool{}
	cfg, err := loadConfig(func(name string) string {
		asked[name] = true
		if name == "DATABASE_URL" {
			return "postgres://u@h/db?sslmode=disable"
		}
		return ""
	})
	require.NoError(t, err)
	applied := map[string]any{
		"DATABASE_URL":         "(required)",
		"DIRECT_DATABASE_URL":  "(DATABASE_URL)",
		"DB_POOLER":            cfg.DBPooler,
		"HTTP_ADDR":            cfg.HTTPAddr,
		"SWEEP_INTERVAL":       cfg.SweepInterval,
		"EVENT_PARTITION_SPAN": cfg.EventPartitionSpan,
		"MAX_BACKFILL_RUNS":    fmt.Sprint(cfg.MaxBackfillRuns),
		"MAX_RUN_DEPENDENCIES": fmt.Sprint(cfg.MaxRunDependencies),
		"MAX_ATTEMPTS":         fmt.Sprint(cfg.MaxAttempts),
		"API_TOKEN":            "(none)",
		"DB_MAX_CONNS":         fmt.Sprint(cfg.DBMaxConns),
		"DB_STATEMENT_TIMEOUT": cfg.StatementTimeout,
		"SHUTDOWN_TIMEOUT":     cfg.ShutdownTimeout,
		"LOG_LEVEL":            strings.ToLower(cfg.LogLevel.String()),
		"DB_RECONNECT_WAIT":    cfg.DBReconnectWait,
		"DB_CONN_MAX_LIFETIME": cfg.DBConnMaxLifetime,
		"WEBHOOK_ALLOW_LOCAL":  fmt.Sprint(cfg.WebhookAllowLocal),
		"EVENT_STREAMS_MAX":    fmt.Sprint(cfg.EventStreamsMax),
		"WEBHOOK_CONCURRENCY":  fmt.Sprint(cfg.WebhookConcurrency),
		"EVENT_POLL_INTERVAL":  cfg.EventPollInterval,
		"ADMISSION_WAIT":       cfg.AdmissionWait,
		"ADMISSION_LONG_WAIT":  cfg.AdmissionLongWait,
		"DB_LEASE_MAX_CONNS":   fmt.Sprint(cfg.DBLeaseMaxConns),
		"LOCK_WAIT":            cfg.LockWait,
		"PRIORITY_AGING":       cfg.PriorityAging,
		// OpenTelemetry's variables (tracing_config.go); unset, tracing is off.
		"OTEL_TRACES_EXPORTER":               "(none)",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "(none)",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "(OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces)",
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "http/protobuf",
		"OTEL_EXPORTER_OTLP_HEADERS":         "(none)",
		"OTEL_SERVICE_NAME":                  "backfill",
		"OTEL_TRACES_SAMPLER":                "parentbased_always_on",
		"OTEL_TRACES_SAMPLER_ARG":            "1",
		// Derived from the pool; the docs state the rule, checked here against the value.
		"ADMISSION_MAX_IN_FLIGHT": "DB_MAX_CONNS` − 2 (at least 3)",
	}
	require.Equal(t, max(3, cfg.DBMaxConns-2), cfg.AdmissionMaxInFlight)
	for name := range asked {
		require.Contains(t, applied, name, "loadConfig reads %s: add it to this test and the docs", name)
	}
	require.Empty(t, cfg.APITokens)

	ops := docDefaults(t, "../../docs/OPERATIONS.md")
	for name := range asked {
		require.Contains(t, ops, name, "docs/OPERATIONS.md does not list %s", name)
	}
	for path, table := range map[string]map[string]string{"docs/OPERATIONS.md": ops, "README.md": docDefaults(t, "../../README.md")} {
		for name, doc := range table {
			require.Contains(t, applied, name, "%s lists %s, which loadConfig does not read", path, name)
			want := applied[name]
			if d, ok := want.(time.Duration); ok {
				got, err := time.ParseDuration(doc)
				require.NoError(t, err, "%s: the default of %s", path, name)
				require.Equal(t, d, got, "%s: the default of %s", path, name)
				continue
			}
			require.Equal(t, want, doc, "%s: the default of %s", path, name)
		}
	}
}

package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTracingIsOffUnlessAnExporterIsConfigured(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://u@h/db?sslmode=disable"}
	cfg, err := loadConfig(getenvFrom(base))
	require.NoError(t, err)
	require.Nil(t, cfg.Tracing)

	with := func(kv ...string) map[string]string {
		env := map[string]string{"DATABASE_URL": base["DATABASE_URL"]}
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	cfg, err = loadConfig(getenvFrom(with("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")))
	require.NoError(t, err)
	require.Equal(t, "http://collector:4318/v1/traces", cfg.Tracing.Endpoint)

	cfg, err = loadConfig(getenvFrom(with("OTEL_TRACES_EXPORTER", "otlp",
		"OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b,x=y",
		"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.01")))
	require.NoError(t, err)
	require.Equal(t, "http://localhost:4318/v1/traces", cfg.Tracing.Endpoint)
	require.Equal(t, map[string]string{"api-key": "a b", "x": "y"}, cfg.Tracing.Headers)
	require.Contains(t, cfg.Tracing.Sampler.Description(), "0.01")
	require.NotContains(t, fmtAttrs(cfg.logAttrs()), "a b", "header values stay out of the log")

	cfg, err = loadConfig(getenvFrom(with("OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")))
	require.NoError(t, err)
	require.Nil(t, cfg.Tracing)

	_, err = loadConfig(getenvFrom(with("OTEL_TRACES_EXPORTER", "zipkin")))
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER")
	_, err = loadConfig(getenvFrom(with("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")))
	require.ErrorContains(t, err, "http/protobuf")
	_, err = loadConfig(getenvFrom(with("OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "lots")))
	require.ErrorContains(t, err, "OTEL_TRACES_SAMPLER_ARG")
}

func fmtAttrs(attrs []any) string { return fmt.Sprint(attrs...) }

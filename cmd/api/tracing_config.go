package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/tracing"
)

// The OpenTelemetry variables the service reads, with the specification's names and
// meanings; tracing is off unless OTEL_TRACES_EXPORTER is otlp or an endpoint is set.
const (
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envHeaders        = "OTEL_EXPORTER_OTLP_HEADERS"
	envServiceName    = "OTEL_SERVICE_NAME"
	envSampler        = "OTEL_TRACES_SAMPLER"
	envSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
)

// defaultOTLPEndpoint is the specification's default for OTLP over HTTP.
const defaultOTLPEndpoint = "http://localhost:4318"

// tracingSettings are the OTEL_* variables as read, for the start-up line.
type tracingSettings struct {
	exporter, endpoint, protocol, serviceName, sampler, samplerArg string
	headers                                                        int
}

// loadTracing reads the OTEL_* variables: nil config when tracing is off.
func loadTracing(getenv func(string) string) (*tracing.Config, tracingSettings, error) {
	s := tracingSettings{
		exporter:    getenv(envTracesExporter),
		protocol:    getenv(envProtocol),
		serviceName: getenv(envServiceName),
		sampler:     getenv(envSampler),
		samplerArg:  getenv(envSamplerArg),
	}
	endpoint := getenv(envTracesEndpoint)
	base := getenv(envEndpoint)
	if endpoint == "" && base != "" {
		// The specification's rule: the base endpoint gets the signal's path appended.
		endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	var errs []error
	headers, err := parseOTLPHeaders(getenv(envHeaders))
	if err != nil {
		errs = append(errs, err)
	}
	s.headers = len(headers)
	sampler, err := tracing.ParseSampler(s.sampler, s.samplerArg)
	if err != nil {
		errs = append(errs, err)
	}
	switch s.protocol {
	case "", "http/protobuf":
	default:
		errs = append(errs, fmt.Errorf("%s=%q: only http/protobuf is supported (OTLP over HTTP, port 4318)", envProtocol, s.protocol))
	}
	on := false
	switch s.exporter {
	case "":
		on = endpoint != ""
	case "none":
	case "otlp":
		on = true
		if endpoint == "" {
			endpoint = defaultOTLPEndpoint + "/v1/traces"
		}
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want otlp or none", envTracesExporter, s.exporter))
	}
	if len(errs) > 0 || !on {
		return nil, s, errors.Join(errs...)
	}
	s.endpoint = endpoint
	return &tracing.Config{Endpoint: endpoint, Headers: headers, Sampler: sampler, ServiceName: s.serviceName}, s, nil
}

// parseOTLPHeaders reads "key=value,key2=value2" with URL-encoded values (the specification's
// format).
func parseOTLPHeaders(v string) (map[string]string, error) {
	out := map[string]string{}
	for pair := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", envHeaders, pair)
		}
		decoded, err := url.QueryUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %q: %w", envHeaders, k, err)
		}
		out[strings.TrimSpace(k)] = decoded
	}
	return out, nil
}

// logAttrs are the tracing settings for the start-up line; headers only counted, as they
// usually carry a key.
func (s tracingSettings) logAttrs() []any {
	return []any{
		strings.ToLower(envTracesExporter), s.exporter,
		strings.ToLower(envEndpoint), s.endpoint,
		strings.ToLower(envTracesEndpoint), s.endpoint,
		strings.ToLower(envProtocol), s.protocol,
		strings.ToLower(envHeaders), fmt.Sprintf("%d header(s)", s.headers),
		strings.ToLower(envServiceName), s.serviceName,
		strings.ToLower(envSampler), s.sampler,
		strings.ToLower(envSamplerArg), s.samplerArg,
	}
}

// newTracer builds the exporter's tracer, or nil (tracing off) for a nil config.
func newTracer(cfg *tracing.Config) (*tracing.Tracer, error) {
	if cfg == nil {
		return nil, nil
	}
	return tracing.New(*cfg)
}

// shutdownTracer exports what is left, within a few seconds: a collector that is down must
// not hold the exit.
func shutdownTracer(t *tracing.Tracer, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		logger.Warn("flushing traces", "err", err)
	}
}

// Package tracing gives the service OpenTelemetry traces: server spans named by route,
// spans for transactions, the sweep, webhook attempts and claimed runs, and W3C trace
// context in and out. A nil *Tracer is tracing off: every method is then a nil check and
// nothing else, so a service without an exporter pays nothing per request.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName is the scope every span of the service is started under.
const instrumentationName = "github.com/backfillsvc/backfill"

// Tracer starts the service's spans. Build it with New or NewWithExporter; nil is off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Config is what cmd/api reads from the OTEL_* variables; this package reads none itself.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
	// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces added).
	Endpoint string
	// Headers are sent with every export (OTEL_EXPORTER_OTLP_HEADERS).
	Headers map[string]string
	// Sampler is OTEL_TRACES_SAMPLER and its argument, parsed by ParseSampler.
	Sampler sdktrace.Sampler
	// ServiceName is OTEL_SERVICE_NAME (default "backfill").
	ServiceName string
}

// propagator reads and writes W3C traceparent and tracestate.
var propagator = propagation.TraceContext{}

// New exports spans in batches to an OTLP/HTTP collector.
func New(cfg Config) (*Tracer, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want an http:// or https:// URL", cfg.Endpoint)
	}
	// Every option is given explicitly, so that the exporter's own reading of OTEL_*
	// variables never decides anything the service's configuration did not.
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(cfg.Endpoint),
		otlptracehttp.WithHeaders(cfg.Headers),
		otlptracehttp.WithTimeout(10 * time.Second),
	}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	return newTracer(sdktrace.NewBatchSpanProcessor(exp), cfg), nil
}

// NewWithExporter sends every span to exp as it ends (tests, with tracetest's in-memory
// exporter).
func NewWithExporter(exp sdktrace.SpanExporter, cfg Config) *Tracer {
	return newTracer(sdktrace.NewSimpleSpanProcessor(exp), cfg)
}

func newTracer(sp sdktrace.SpanProcessor, cfg Config) *Tracer {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "backfill"
	}
	if cfg.Sampler == nil {
		cfg.Sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	// A resource of our own: resource.Default would read OTEL_RESOURCE_ATTRIBUTES.
	res := resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(cfg.Sampler),
		sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
			AttributeValueLengthLimit: 1024, AttributeCountLimit: 64,
			EventCountLimit: 32, LinkCountLimit: 8,
			AttributePerEventCountLimit: 16, AttributePerLinkCountLimit: 16,
		}),
	)
	started.Store(true)
	return &Tracer{provider: tp, tracer: tp.Tracer(instrumentationName)}
}

// Shutdown flushes the spans not yet exported.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ParseSampler turns OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG into a sampler, with
// the specification's names. Empty is parentbased_always_on.
func ParseSampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", arg)
		}
		ratio = r
	}
	switch strings.TrimSpace(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
	}
}

// Start starts a span named name under ctx's. With tracing off it returns ctx and the
// span already in ctx (a no-op one when there is none), without allocating.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, marking it failed when err is not nil. Call it only on a span this package
// started (with tracing off, Start hands back the caller's own span).
func (t *Tracer) End(span trace.Span, err error) {
	if t == nil {
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Traceparent is the W3C traceparent of ctx's span, or "" when it has none.
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// WithTraceparent returns ctx carrying traceparent as its remote parent; an empty or
// malformed value leaves ctx as it is.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// TraceID is the trace id of ctx's span, or "" when it has none.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// RunSpan records a claimed run's span under ctx's (the claim) and returns its traceparent,
// which the executor hands to its program and sends back on the run's report, so that the
// program's work and the report join the claim's trace. "" with tracing off.
func (t *Tracer) RunSpan(ctx context.Context, id int64, dagID, runID string) string {
	if t == nil {
		return ""
	}
	ctx, span := t.tracer.Start(ctx, "run "+dagID, trace.WithAttributes(
		attribute.Int64("run.id", id), attribute.String("dag_id", dagID), attribute.String("run_id", runID)))
	span.End()
	return Traceparent(ctx)
}

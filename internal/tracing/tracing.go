// Package tracing exports OpenTelemetry traces of Surge's requests over
// OTLP. It is off unless asked for (--otel, or the standard OTEL_*
// variables naming an endpoint); off, the server installs none of it, so
// requests pay nothing.
//
// What a trace shows: the HTTP or gRPC server span (W3C traceparent
// accepted, traceresponse returned), and under it, from timestamps the
// engine records for traced requests only (engine.Tracer), the wait in the
// partition's queue, the apply, the group commit (one span per batch,
// linked from every traced request in it) and the reply; then, from the
// engine's steps (steps.go), the messages, timers, job dispatches and
// message releases the request caused, in other partitions, batches and
// nodes, and a worker's run of a job (job.go).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/engine"
)

// RatioFromEnv is Config.SampleRatio's "not set": the sampler is then the
// one OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name (the SDK's
// default, parentbased_always_on, without them).
const RatioFromEnv = -1

// ServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const ServiceName = "surge"

// instrumentation is the tracer's name in every span.
const instrumentation = "github.com/surge-run/surge"

// Config is how `surge serve` turns tracing on.
type Config struct {
	// On turns tracing on (--otel); it is also on when the environment
	// names an OTLP endpoint (see Enabled).
	On bool
	// SampleRatio, in [0,1], samples that share of the traces that start
	// here, and follows the caller's decision for those that come with a
	// traceparent (parentbased_traceidratio); RatioFromEnv leaves it to
	// the OTEL_TRACES_SAMPLER variables.
	SampleRatio float64
}

// Enabled reports whether cfg or the environment turns tracing on:
// --otel, OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint variable; and
// OTEL_SDK_DISABLED=true turns it off whatever the rest says.
func (c Config) Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if c.On || os.Getenv("OTEL_TRACES_EXPORTER") == "otlp" {
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Check refuses a ratio outside [0,1].
func (c Config) Check() error {
	if c.SampleRatio != RatioFromEnv && (c.SampleRatio < 0 || c.SampleRatio > 1) {
		return fmt.Errorf("--trace-sample-ratio %v (SURGE_TRACE_SAMPLE_RATIO): must be between 0 and 1 (e.g. 0.01 for 1 %%), or -1 to take OTEL_TRACES_SAMPLER", c.SampleRatio)
	}
	return nil
}

// Start builds the exporter the OTEL_EXPORTER_OTLP_* variables describe
// (protocol grpc, or http/protobuf by default, as the specification says)
// and returns the tracing it feeds. Shutdown flushes it.
func Start(ctx context.Context, cfg Config) (*Tracing, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res), IDGenerator()}
	ratio, atEdge, err := rootRatio(cfg)
	if err != nil {
		return nil, err
	}
	if atEdge {
		// The ratio is applied by Handler before any span exists; what
		// reaches the SDK as a root is sampled already.
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t := New(tp)
	t.shutdown = tp.Shutdown
	t.edgeRatio = ratio
	if !atEdge {
		t.edgeRatio = 1
	}
	return t, nil
}

// rootRatio is the share of new traces sampled, if it is a plain
// parent-based ratio (the flag, or OTEL_TRACES_SAMPLER=
// parentbased_traceidratio): Handler then decides before the SDK makes a
// span, so an unsampled request costs a random number, not a span. Other
// samplers from the environment are left to the SDK (atEdge false).
func rootRatio(cfg Config) (ratio float64, atEdge bool, err error) {
	if cfg.SampleRatio != RatioFromEnv {
		return cfg.SampleRatio, true, nil
	}
	if os.Getenv("OTEL_TRACES_SAMPLER") != "parentbased_traceidratio" {
		return 1, false, nil
	}
	arg := os.Getenv("OTEL_TRACES_SAMPLER_ARG")
	if arg == "" {
		return 1, true, nil // the specification's default ratio
	}
	ratio, err = strconv.ParseFloat(arg, 64)
	if err != nil || ratio < 0 || ratio > 1 {
		return 0, false, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio between 0 and 1", arg)
	}
	return ratio, true, nil
}

func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: Surge exports grpc or http/protobuf", proto)
	}
}

// Tracing makes Surge's spans with one TracerProvider.
type Tracing struct {
	// edgeRatio is the share of requests without a traceparent that
	// Handler lets start a trace (see rootRatio); 1 leaves it to the
	// SDK's sampler.
	edgeRatio float64
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	shutdown  func(context.Context) error

	// The engine's traced steps, queued for their spans (steps.go).
	steps       chan engine.StepTrace
	stepsOnce   sync.Once
	stepsMu     sync.RWMutex // Step holds it (read) to send; stopSteps to close
	stepsClosed bool
	stepsDone   chan struct{}
	dropped     atomic.Uint64
}

// New traces with tp (tests pass one over an in-memory exporter). tp
// must use IDGenerator() for the spans of later steps (a saga's messages,
// a job's dispatch) to name the right parents; Start's does.
func New(tp trace.TracerProvider) *Tracing {
	return &Tracing{edgeRatio: 1, tracer: tp.Tracer(instrumentation), prop: propagation.TraceContext{}}
}

// Shutdown exports what is buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.stopSteps()
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

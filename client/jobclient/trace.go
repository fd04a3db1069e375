package jobclient

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceHeader is the W3C header Surge reads a caller's trace from.
const traceHeader = "traceparent"

// propagateTrace is on every JobService call (Submit, SubmitMany, Get…):
// a call made with a context that carries a span (the application's
// OpenTelemetry span) sends it, so the job's trace on the server (its
// dispatch, the worker's run, the report) hangs under the caller's span.
// It injects with the global propagator, as an OpenTelemetry application
// sets it (otel.SetTextMapPropagator), and, when that one wrote no
// traceparent (it is a no-op until set), with W3C Trace Context, the one
// Surge reads. A context without a span sends nothing. Interceptors given
// with WithConnectOptions run inside it, so one that makes a client span
// of its own (otelconnect) names that span instead.
func propagateTrace() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient {
				injectTrace(ctx, req.Header())
			}
			return next(ctx, req)
		}
	}
}

func injectTrace(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	carrier := propagation.HeaderCarrier(h)
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if h.Get(traceHeader) == "" {
		propagation.TraceContext{}.Inject(ctx, carrier)
	}
}

package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// JobSpan starts the span of a worker's run of a job, a child of the
// job's traceparent (and tracestate) as its assignment carried them, and
// returns the context to hand on (to the job's child process, and with
// the report) and the function that ends the span. Without a traceparent
// it makes nothing and hands the empty context on.
func (t *Tracing) JobSpan(ctx context.Context, jobID, queue, traceparent, tracestate string) (tp, ts string, end func(error)) {
	if traceparent == "" {
		return "", "", func(error) {}
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate}
	ctx = t.prop.Extract(ctx, carrier)
	_, span := t.tracer.Start(ctx, "job.execute", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("surge.job.id", jobID), attribute.String("surge.job.queue", queue)))
	out := propagation.MapCarrier{}
	t.prop.Inject(trace.ContextWithSpan(ctx, span), out)
	return out["traceparent"], out["tracestate"], func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

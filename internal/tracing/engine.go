package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/engine"
)

// Finished is engine.Tracer's: it turns the engine's timestamps into the
// spans of the request's partition queue wait, its batch's apply, the
// group commit it joined (linked) and the reply.
func (t *Tracing) Finished(ctx context.Context, rt engine.RequestTrace) {
	if tc, ok := engine.TraceContextOf(ctx); ok && engineContext(trace.SpanContextFromContext(ctx)) != tc {
		// Forwarded by another node: its spans are children of the
		// caller's span there, not of the call that carried it.
		ctx = trace.ContextWithRemoteSpanContext(ctx, spanContext(tc))
	}
	part := attribute.Int("surge.partition", rt.Partition)
	b := rt.Batch
	if b == nil || b.Started == 0 {
		// Answered without being applied (refused, or a query answered
		// on its own): only its wait shows.
		t.span(ctx, "engine.queue", rt.Enqueued, rt.Replied, rt.Err, part)
		return
	}
	t.span(ctx, "engine.queue", rt.Enqueued, b.Started, nil, part)
	t.span(ctx, "engine.apply", b.Started, b.Appended, rt.Err, part, trace.WithAttributes(attribute.Int("surge.batch.inputs", b.Inputs)))
	from := b.Appended
	if b.Durable != 0 {
		commit := t.batchSpan(ctx, b, part)
		t.span(ctx, "engine.commit_wait", b.Appended, b.Durable, nil, part,
			trace.WithLinks(trace.Link{SpanContext: commit}))
		from = b.Durable
	}
	t.span(ctx, "engine.reply", from, rt.Replied, nil, part)
}

// batchSpan makes the batch's one group-commit span, in the trace of
// whichever of its traced requests finishes first, and returns it for
// the others to link to.
func (t *Tracing) batchSpan(ctx context.Context, b *engine.BatchTrace, part attribute.KeyValue) trace.SpanContext {
	b.Once.Do(func() {
		_, s := t.tracer.Start(ctx, "log.group_commit", trace.WithTimestamp(timeOf(b.Appended)),
			trace.WithAttributes(part, attribute.Int("surge.batch.inputs", b.Inputs),
				attribute.Int("surge.batch.records", b.Records), attribute.Int("surge.batch.bytes", b.Bytes),
				attribute.Int64("surge.log.sync_ns", b.Durable-b.Appended)))
		s.End(trace.WithTimestamp(timeOf(b.Durable)))
		b.Mark = s.SpanContext()
	})
	sc, _ := b.Mark.(trace.SpanContext)
	return sc
}

// span records a finished span from start to end (Unix nanoseconds).
func (t *Tracing) span(ctx context.Context, name string, start, end int64, err error, attr attribute.KeyValue, more ...trace.SpanStartOption) {
	opts := append([]trace.SpanStartOption{trace.WithTimestamp(timeOf(start)), trace.WithAttributes(attr)}, more...)
	_, s := t.tracer.Start(ctx, name, opts...)
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End(trace.WithTimestamp(timeOf(end)))
}

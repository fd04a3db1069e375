package engine

import (
	"context"
	"sync"
	"time"
)

// Tracer is told, after its reply, where a traced request's time went.
// The engine records only timestamps it takes anyway (or, for a traced
// request, one clock read at each step) and makes no span itself: the
// partition's loop never calls into a tracing library, and with no Tracer
// set (the default) nothing is recorded at all. A trace context is never
// logged: it stays in the request, outside the command's encoding, so it
// cannot change what is replayed.
//
// Only requests whose context went through WithTrace are timed.
type Tracer interface {
	// Finished runs on the requester's goroutine once the reply is out.
	Finished(ctx context.Context, t RequestTrace)
}

// traceKey marks a context whose requests the engine times.
type traceKey struct{}

// WithTrace marks ctx so that the engine times its requests for the
// Tracer. The tracer marks only sampled requests: for the others the
// engine's test is one context lookup, no call into a tracing library
// (a few calls deeper there made every request's goroutine grow its
// stack, a copy that cost more than all of tracing at 1 %).
func WithTrace(ctx context.Context) context.Context {
	return context.WithValue(ctx, traceKey{}, true)
}

// RequestTrace is one traced request's path through its partition, as
// wall-clock Unix nanoseconds (0: the step did not happen).
type RequestTrace struct {
	Partition int
	Command   bool  // false for a query
	Enqueued  int64 // entered the partition's inbox
	Replied   int64 // the requester got the answer
	Batch     *BatchTrace
	Err       error
}

// BatchTrace is the batch a traced request was applied in: shared by every
// traced request of the batch, so that a tracer makes one span of its
// group commit and links to it from each.
type BatchTrace struct {
	Started  int64 // the processor started building the batch
	Appended int64 // applied and handed to the log
	Durable  int64 // the log's group commit (write and fsync) returned
	Inputs   int   // requests, mail and timers in the batch
	Records  int   // log records it wrote
	Bytes    int
	// Once and Mark are the tracer's: one span for the batch, made by
	// whichever of its requests finishes first.
	Once sync.Once
	Mark any
}

// traceEnqueue marks r as traced if ctx carries a sampled trace.
func (e *Engine) traceEnqueue(ctx context.Context, r *Request) {
	if e.opts.Tracer != nil && ctx != nil && ctx.Value(traceKey{}) != nil {
		r.traced, r.tEnq = true, time.Now().UnixNano()
		r.tc, _ = TraceContextOf(ctx)
	}
}

// traceBatch gives the traced requests of b (if any) the batch's times;
// called as the batch is handed to the log.
func (p *partition) traceBatch(b *batch) {
	var bt *BatchTrace
	for _, r := range b.reqs {
		if !r.traced {
			continue
		}
		if bt == nil {
			bt = &BatchTrace{Started: b.startedNano, Appended: time.Now().UnixNano(),
				Inputs: b.applyCount, Records: len(b.offsets), Bytes: len(b.buf)}
		}
		r.tBatch = bt
	}
	b.trace = bt
}

// traceDurable stamps the batch's group commit, before its replies go.
func (b *batch) traceDurable() {
	if b.trace != nil {
		b.trace.Durable = time.Now().UnixNano()
		b.trace = nil
	}
}

// traceFinished tells the tracer about r once it is answered, and clears
// r's trace for reuse.
func (e *Engine) traceFinished(ctx context.Context, part int, r *Request) {
	t := RequestTrace{Partition: part, Command: r.cmd != nil, Enqueued: r.tEnq, Replied: time.Now().UnixNano(), Batch: r.tBatch, Err: r.err}
	r.traced, r.tBatch, r.tc = false, nil, TraceContext{}
	e.opts.Tracer.Finished(ctx, t)
}

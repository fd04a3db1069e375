package tracing

import (
	"context"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanIDKey carries a span id chosen before its span is made: the engine
// picks a step's id in the partition's loop, where messages it sends
// must name it as their parent, and the span is made later, elsewhere.
type spanIDKey struct{}

func withSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, spanIDKey{}, id)
}

// idGenerator is the SDK's id source with one addition: a span id chosen
// in advance (withSpanID) is used as is. The TracerProvider of a Tracing
// must use it (Start's does; tests add IDGenerator()), or the spans of
// steps after the first would name parents that do not exist.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			tid[i], tid[8+i] = byte(hi>>(8*i)), byte(lo>>(8*i))
		}
	}
	return tid, idGenerator{}.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if id, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok && id.IsValid() {
		return id
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		v := rand.Uint64()
		for i := range 8 {
			sid[i] = byte(v >> (8 * i))
		}
	}
	return sid
}

// IDGenerator is the option a TracerProvider given to New needs for the
// spans of a saga's, a job's or a held message's later steps to link up.
func IDGenerator() sdktrace.TracerProviderOption { return sdktrace.WithIDGenerator(idGenerator{}) }

package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/engine"
)

// edgeTracing is tracing as Start builds it for --trace-sample-ratio
// ratio, exporting to nowhere.
func edgeTracing(b *testing.B, ratio float64) *Tracing {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	t := New(tp)
	t.edgeRatio = ratio
	return t
}

// BenchmarkRequest is what tracing adds to one request's CPU: the server
// span and, for a sampled request, the engine's spans made from its
// timestamps. "off" is the server without tracing (no wrapper at all).
func BenchmarkRequest(b *testing.B) {
	var tr *Tracing
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tr != nil && trace.SpanContextFromContext(r.Context()).IsSampled() {
			now := int64(1e18)
			bt := &engine.BatchTrace{Started: now, Appended: now + 1000, Durable: now + 2000, Inputs: 8, Records: 8, Bytes: 800}
			tr.Finished(r.Context(), engine.RequestTrace{Command: true, Enqueued: now - 1000, Replied: now + 3000, Batch: bt})
		}
		w.WriteHeader(http.StatusOK)
	})
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"off", -1}, {"ratio=0.01", 0.01}, {"ratio=1", 1}} {
		b.Run(c.name, func(b *testing.B) {
			var h http.Handler = inner
			tr = nil
			if c.ratio >= 0 {
				tr = edgeTracing(b, c.ratio)
				h = tr.Handler(inner)
			}
			req := httptest.NewRequest("POST", "/v2/reservations", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				clear(w.Header())
				h.ServeHTTP(w, req)
			}
		})
	}
}

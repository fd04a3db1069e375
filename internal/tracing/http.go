package tracing

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/engine"
)

// ResponseHeader returns the server span's context to the caller, as the
// W3C Trace Context Level 2 draft names it, so that a client that did not
// send a traceparent can still find its trace.
const ResponseHeader = "traceresponse"

// traceparentHeader is canonical, for a lookup that does not allocate.
const traceparentHeader = "Traceparent"

// Handler wraps the whole server: HTTP routes and gRPC/Connect calls
// alike (they share the listener), each in one server span, a child of
// the caller's traceparent if it sent one.
//
// A request whose trace is not sampled (99 % of them at 1 %) goes on
// untouched: no header, no wrapper, no new context, so that sampling
// little costs little. Its traceresponse would name a trace nobody kept.
//
// Requests to the untraced paths (exact paths: the node-to-node route)
// go on untouched too: their work is traced already, in the trace of
// the request that caused it, by the contexts the call carries in its
// body; a span of their own would be the root of a trace of nothing,
// at the sampling ratio, and would make forwarded requests that carry
// no context look traced.
func (t *Tracing) Handler(next http.Handler, untraced ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.mayTrace(r, untraced) {
			t.serveTraced(next, w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mayTrace tells whether r may start a server span: a traceparent, or
// the edge's own sampling draw.
func (t *Tracing) mayTrace(r *http.Request, untraced []string) bool {
	if slices.Contains(untraced, r.URL.Path) {
		return false
	}
	return t.edgeRatio >= 1 || rand.Float64() < t.edgeRatio || len(r.Header[traceparentHeader]) != 0
}

// serveTraced serves r in a server span (if its trace is sampled). It is
// kept out of Handler's closure, and out of line, because every frame of
// that closure is on the stack of every request, traced or not, at its
// deepest point (a body read parked in the HTTP/2 server's select): the
// span's locals there (its context, attributes and response header)
// made the stack outgrow its first size, and the runtime copied the
// stack of 99 % of requests to serve the 1 % that are traced (+8 % CPU
// per reservation on the compatibility flow, docs/BENCHMARKS.md).
//
//go:noinline
func (t *Tracing) serveTraced(next http.Handler, w http.ResponseWriter, r *http.Request) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		next.ServeHTTP(w, r)
		return
	}
	defer span.End()
	span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
	grpc := strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
	sc := span.SpanContext()
	w.Header().Set(ResponseHeader, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	r = r.WithContext(engine.WithTraceContext(ctx, engineContext(sc)))
	next.ServeHTTP(sw, r)
	name(span, r, grpc)
	span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
	if st := w.Header().Get("Grpc-Status"); st != "" && st != "0" {
		span.SetStatus(codes.Error, "grpc-status "+st)
	} else if sw.code >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(sw.code))
	}
}

// name names the span after the route the mux matched (a gRPC call after
// its method), not the path, so that names stay few.
func name(span trace.Span, r *http.Request, grpc bool) {
	switch {
	case grpc:
		span.SetName(strings.TrimPrefix(r.URL.Path, "/"))
		span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", r.URL.Path))
	case r.Pattern != "":
		span.SetName(r.Pattern)
		span.SetAttributes(attribute.String("http.route", r.Pattern))
	}
}

// statusWriter keeps the status code; Flush and Unwrap keep streams and
// http.ResponseController working through it.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

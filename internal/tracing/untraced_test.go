package tracing

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/surge-run/surge/internal/engine"
)

// A request to an untraced path makes no span, gets no traceresponse and
// reaches the handler with no trace context, even with a traceparent and
// every request sampled; the other paths are traced as before.
func TestUntracedPathMakesNoSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), IDGenerator()))
	traced := map[string]bool{}
	h := tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, traced[r.URL.Path] = engine.TraceContextOf(r.Context())
	}), "/internal/call")
	for _, path := range []string{"/internal/call", "/v1/x"} {
		req := httptest.NewRequest("POST", path, nil)
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		want := path != "/internal/call"
		if got := w.Header().Get(ResponseHeader) != ""; got != want || traced[path] != want {
			t.Errorf("%s: traceresponse %v, traced context %v; want %v", path, got, traced[path], want)
		}
	}
	if got := exp.GetSpans(); len(got) != 1 || got[0].Name != "POST" {
		t.Errorf("spans %v, want the one of /v1/x", got)
	}
}

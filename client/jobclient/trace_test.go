package jobclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// headerJobs is a JobService that keeps the trace headers of each submit.
type headerJobs struct {
	jqpbconnect.UnimplementedJobServiceHandler
	got []http.Header
}

func (h *headerJobs) SubmitJob(_ context.Context, req *connect.Request[jqpb.SubmitJobRequest]) (*connect.Response[jqpb.SubmitJobResponse], error) {
	h.got = append(h.got, req.Header().Clone())
	return connect.NewResponse(&jqpb.SubmitJobResponse{JobId: "j1"}), nil
}

func (h *headerJobs) SubmitJobs(_ context.Context, req *connect.Request[jqpb.SubmitJobsRequest]) (*connect.Response[jqpb.SubmitJobsResponse], error) {
	h.got = append(h.got, req.Header().Clone())
	return connect.NewResponse(&jqpb.SubmitJobsResponse{JobIds: []string{"j1"}}), nil
}

// Submit and SubmitMany with a context that carries a span send it as a
// W3C traceparent (and tracestate), with no OpenTelemetry SDK and no
// global propagator set; without a span they send none.
func TestSubmitSendsTheContextsSpan(t *testing.T) {
	h := &headerJobs{}
	mux := http.NewServeMux()
	mux.Handle(jqpbconnect.NewJobServiceHandler(h))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	c := New(srv.URL)

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))
	if _, err := c.Submit(traced, "q", nil, SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitMany(traced, []NewJob{{Queue: "q"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), "q", nil, SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "00-" + tid.String() + "-" + sid.String() + "-01"
	for i, call := range []string{"Submit", "SubmitMany"} {
		if got := h.got[i].Get("traceparent"); got != want {
			t.Errorf("%s in a span: traceparent %q, want %q", call, got, want)
		}
		if got := h.got[i].Get("tracestate"); got != "vendor=x" {
			t.Errorf("%s in a span: tracestate %q, want vendor=x", call, got)
		}
	}
	if got := h.got[2].Get("traceparent"); got != "" {
		t.Errorf("Submit without a span: traceparent %q, want none", got)
	}
}

package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/server"
	"github.com/surge-run/surge/internal/tracing"
)

// memTracing traces everything into a new in-memory exporter.
func memTracing(t *testing.T) (*tracing.Tracing, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), tracing.IDGenerator())
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tracing.New(tp), exp
}

// A job submitted with a traceparent, run by `surge worker`: the command
// sees TRACEPARENT in the submit's trace, naming the worker's job.execute
// span, which is the child of the server's jobs.dispatch step, itself the
// child of the submit's server span; the report's server span is the
// child of job.execute.
func TestWorkerRunsTheJobInItsTrace(t *testing.T) {
	srvTr, srvExp := memTracing(t)
	wTr, wExp := memTracing(t)
	base := tracedJobServer(t, srvTr, wTr)
	id, got := runTracedJob(t, base)
	exec := spanNamed(t, wExp, id, "job.execute")
	if !strings.Contains(got, exec.SpanContext.SpanID().String()) {
		t.Errorf("TRACEPARENT %q does not name the worker's job.execute span %s", got, exec.SpanContext.SpanID())
	}
	dispatch := spanNamed(t, srvExp, id, "jobs.dispatch")
	if exec.Parent.SpanID() != dispatch.SpanContext.SpanID() {
		t.Errorf("job.execute's parent %s, want the server's jobs.dispatch %s", exec.Parent.SpanID(), dispatch.SpanContext.SpanID())
	}
	submit := spanNamed(t, srvExp, id, "/jq.JobService/")
	if dispatch.Parent.SpanID() != submit.SpanContext.SpanID() {
		t.Errorf("jobs.dispatch's parent %s, want the submit's server span %s", dispatch.Parent.SpanID(), submit.SpanContext.SpanID())
	}
	reportSpan(t, srvExp, id, exec.SpanContext.SpanID())
}

// A worker that does not trace still runs the command in the job's
// trace: TRACEPARENT names the server's dispatch, and the report is its
// child.
func TestUntracedWorkerHandsTheTraceOn(t *testing.T) {
	srvTr, srvExp := memTracing(t)
	base := tracedJobServer(t, srvTr, nil)
	id, got := runTracedJob(t, base)
	dispatch := spanNamed(t, srvExp, id, "jobs.dispatch")
	if !strings.Contains(got, dispatch.SpanContext.SpanID().String()) {
		t.Errorf("TRACEPARENT %q does not name the dispatch span %s", got, dispatch.SpanContext.SpanID())
	}
	reportSpan(t, srvExp, id, dispatch.SpanContext.SpanID())
}

// reportSpan waits for the worker's report, a child of parent.
func reportSpan(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, parent trace.SpanID) {
	t.Helper()
	waitSpan(t, exp, id, func(s tracetest.SpanStub) bool {
		return s.SpanKind == trace.SpanKindServer && s.Parent.SpanID() == parent && s.Name == "jq.WorkerService/ReportResult"
	})
}

const jobTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// tracedJobServer serves with srvTr and runs `surge worker`'s worker
// against it with wTr (nil: the worker does not trace).
func tracedJobServer(t *testing.T, srvTr, wTr *tracing.Tracing) string {
	ctx, stop := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Ready: ready,
			Logger: slog.New(slog.DiscardHandler), Tracer: srvTr})
	}()
	t.Cleanup(func() { stop(); <-done })
	base := "http://" + <-ready
	w := newCommandWorker(jobclient.New(base), jobclient.WorkerConfig{ID: "tr", Concurrency: 1}, wTr)
	wctx, drain := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(wctx); close(stopped) }()
	t.Cleanup(func() { drain(); w.StopNow(); <-stopped })
	return base
}

// runTracedJob submits a command printing $TRACEPARENT with a
// traceparent, and returns the trace and what the command printed, which
// must be in that trace.
func runTracedJob(t *testing.T, base string) (trace.TraceID, string) {
	t.Helper()
	const traceID, parentSpan = jobTraceID, "00f067aa0ba902b7"
	jobs := jqpbconnect.NewJobServiceClient(http.DefaultClient, base)
	req := connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{"command":["sh","-c","printf %s \"$TRACEPARENT\""]}`)})
	req.Header().Set("traceparent", "00-"+traceID+"-"+parentSpan+"-01")
	res, err := jobs.SubmitJob(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	c := jobclient.New(base)
	job := waitStatus(t, c, res.Msg.JobId, jobclient.StatusDone)
	got := string(job.Result)
	if !strings.HasPrefix(got, "00-"+traceID+"-") {
		t.Fatalf("the command's TRACEPARENT %q, want one in trace %s", got, traceID)
	}
	id, _ := trace.TraceIDFromHex(traceID)
	return id, got
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, name string) tracetest.SpanStub {
	t.Helper()
	return waitSpan(t, exp, id, func(s tracetest.SpanStub) bool { return s.Name == name })
}

// waitSpan waits (up to 30 s) for a span of trace id that ok accepts.
func waitSpan(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, ok func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var names []string
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() != id {
				continue
			}
			if ok(s) {
				return s
			}
			names = append(names, s.Name+"←"+s.Parent.SpanID().String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: no such span among %v", id, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

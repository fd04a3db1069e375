package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/tracing"
)

// clientTrace is the traceparent a caller sends, and what it names.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// tracedServer serves with tracing into an in-memory exporter, sampling
// every trace.
func tracedServer(t *testing.T) (string, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), tracing.IDGenerator())
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return serveForTest(t, Config{Tracer: tracing.New(tp)}), exp
}

// spansOf waits for the spans of trace id to include every name in want
// (the engine's are made once the reply is out, so they may trail it),
// and returns them by name.
func spansOf(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, want ...string) map[string]tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == id {
				got[s.Name] = s
			}
		}
		missing := []string{}
		for _, n := range want {
			if _, ok := got[n]; !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: no span %v among %v", id, missing, keys(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func keys(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// engineSpans are the spans of a command's way through its partition.
var engineSpans = []string{"engine.queue", "engine.apply", "log.group_commit", "engine.commit_wait", "engine.reply"}

// checkEngineSpans: every engine span is a child of the server span, and
// the commit wait links to the batch's group commit, which carries the
// batch's size and sync time.
func checkEngineSpans(t *testing.T, spans map[string]tracetest.SpanStub, server string) {
	t.Helper()
	srv := spans[server].SpanContext.SpanID()
	for _, n := range engineSpans {
		if p := spans[n].Parent.SpanID(); p != srv {
			t.Errorf("%s: parent %s, want the server span %s", n, p, srv)
		}
	}
	wait := spans["engine.commit_wait"]
	commit := spans["log.group_commit"]
	if len(wait.Links) != 1 || wait.Links[0].SpanContext.SpanID() != commit.SpanContext.SpanID() {
		t.Errorf("engine.commit_wait links %v, want the group commit %s", wait.Links, commit.SpanContext.SpanID())
	}
	attrs := map[string]bool{}
	for _, a := range commit.Attributes {
		attrs[string(a.Key)] = true
	}
	for _, k := range []string{"surge.batch.inputs", "surge.batch.records", "surge.log.sync_ns"} {
		if !attrs[k] {
			t.Errorf("log.group_commit has no %s: %v", k, commit.Attributes)
		}
	}
	q, a := spans["engine.queue"], spans["engine.apply"]
	if q.EndTime.After(a.StartTime) || a.EndTime.After(commit.StartTime) || wait.EndTime.After(spans["engine.reply"].StartTime.Add(time.Microsecond)) {
		t.Errorf("spans out of order: queue %v–%v, apply %v–%v, commit %v–%v", q.StartTime, q.EndTime, a.StartTime, a.EndTime, commit.StartTime, commit.EndTime)
	}
}

// A ticketing reservation over HTTP with a caller's traceparent: the
// server span is its child, the answer carries traceresponse in the same
// trace, and the engine's spans hang under the server span.
func TestTraceTicketingReservation(t *testing.T) {
	base, exp := tracedServer(t)
	post(t, base+"/v1/event", `{"eventName":"tr","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`, "")
	req, _ := http.NewRequest("POST", base+"/v1/event/tr/reservation", strings.NewReader(`{"userId":"u1","eventId":"tr","areaId":"A","numOfSeats":2,"type":"RANDOM"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", clientParent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reservation: %s", resp.Status)
	}
	tr := resp.Header.Get("traceresponse")
	if !strings.HasPrefix(tr, "00-"+clientTraceID+"-") || !strings.HasSuffix(tr, "-01") {
		t.Fatalf("traceresponse %q, want one in trace %s, sampled", tr, clientTraceID)
	}
	id, _ := trace.TraceIDFromHex(clientTraceID)
	name := "POST /v1/event/{id}/reservation"
	spans := spansOf(t, exp, id, append([]string{name}, engineSpans...)...)
	s := spans[name]
	if s.Parent.SpanID().String() != clientSpanID || !s.Parent.IsRemote() || s.SpanKind != trace.SpanKindServer {
		t.Errorf("server span's parent %s (remote %v, kind %v), want the caller's %s", s.Parent.SpanID(), s.Parent.IsRemote(), s.SpanKind, clientSpanID)
	}
	if !strings.Contains(tr, s.SpanContext.SpanID().String()) {
		t.Errorf("traceresponse %q does not name the server span %s", tr, s.SpanContext.SpanID())
	}
	checkEngineSpans(t, spans, name)
}

// A jobs SubmitJob over gRPC: the traceparent in the call's metadata is
// the parent, traceresponse comes back in its headers, and the engine's
// spans hang under the server span, named after the method.
func TestTraceSubmitJobOverGRPC(t *testing.T) {
	base, exp := tracedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs := jqpbconnect.NewJobServiceClient(h2cClient(), base, connect.WithGRPC())
	req := connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{"n":1}`)})
	req.Header().Set("traceparent", clientParent)
	res, err := jobs.SubmitJob(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if tr := res.Header().Get("traceresponse"); !strings.HasPrefix(tr, "00-"+clientTraceID+"-") {
		t.Errorf("traceresponse %q, want one in trace %s", tr, clientTraceID)
	}
	id, _ := trace.TraceIDFromHex(clientTraceID)
	name := "jq.JobService/SubmitJob"
	spans := spansOf(t, exp, id, append([]string{name}, engineSpans...)...)
	if p := spans[name].Parent.SpanID().String(); p != clientSpanID {
		t.Errorf("server span's parent %s, want the caller's %s", p, clientSpanID)
	}
	checkEngineSpans(t, spans, name)
}

// Without a traceparent a request starts its own trace, which the answer
// names.
func TestTraceStartsWithoutTraceparent(t *testing.T) {
	base, exp := tracedServer(t)
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tr := resp.Header.Get("traceresponse")
	parts := strings.Split(tr, "-")
	if len(parts) != 4 {
		t.Fatalf("traceresponse %q, want version-trace-span-flags", tr)
	}
	id, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	spans := spansOf(t, exp, id, "GET /healthz")
	if spans["GET /healthz"].Parent.IsValid() {
		t.Errorf("a request without traceparent got parent %v", spans["GET /healthz"].Parent)
	}
}

// Off by default: no traceresponse, and nothing traced.
func TestTracingOffByDefault(t *testing.T) {
	base := serveForTest(t, Config{})
	post(t, base+"/v1/event", `{"eventName":"off","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`, clientParent)
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("traceparent", clientParent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tr := resp.Header.Get("traceresponse"); tr != "" {
		t.Errorf("tracing off, yet traceresponse %q", tr)
	}
}

func post(t *testing.T, url, body, traceparent string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

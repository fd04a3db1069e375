package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// A traced job offered again to its worker when the worker reconnects
// (a new stream under the same id, holding nothing it declares) comes
// with a traceparent in the job's trace, naming a new jobs.dispatch step,
// a child of the submit's server span as the first dispatch is.
func TestReofferedJobKeepsItsTrace(t *testing.T) {
	base, exp := tracedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	w := jqpbconnect.NewWorkerServiceClient(hc, base, connect.WithGRPC())
	jobs := jqpbconnect.NewJobServiceClient(hc, base, connect.WithGRPC())
	reg, err := w.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Concurrency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	sub := connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{}`), MaxRetries: 3})
	sub.Header().Set("traceparent", clientParent)
	if _, err := jobs.SubmitJob(ctx, sub); err != nil {
		t.Fatal(err)
	}
	first := assignment(ctx, t, w, reg.Msg.WorkerId)
	again := assignment(ctx, t, w, reg.Msg.WorkerId)
	if again.JobId != first.JobId {
		t.Fatalf("the new stream was offered %s, want %s again", again.JobId, first.JobId)
	}
	for _, a := range []*jqpb.JobAssignment{first, again} {
		if !strings.HasPrefix(a.Traceparent, "00-"+clientTraceID+"-") {
			t.Errorf("assignment traceparent %q, want one in the submit's trace %s", a.Traceparent, clientTraceID)
		}
	}
	if first.Traceparent == again.Traceparent {
		t.Errorf("the offer again names the first dispatch %q, want a dispatch of its own", first.Traceparent)
	}
	id, _ := trace.TraceIDFromHex(clientTraceID)
	spans := traceSpans(t, exp.GetSpans, id, "jobs.dispatch", "jobs.dispatch")
	checkTree(t, spans, clientSpanID, map[string]string{"jobs.dispatch": "jq.JobService/SubmitJob"})
}

// assignment opens a stream for worker, returns the first job it is
// sent and closes the stream without reporting.
func assignment(ctx context.Context, t *testing.T, w jqpbconnect.WorkerServiceClient, worker string) *jqpb.JobAssignment {
	t.Helper()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	s, err := w.StreamJobs(sctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: worker}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for s.Receive() {
		if a := s.Msg(); a.JobId != "" && !a.Cancel {
			return a
		}
	}
	t.Fatalf("stream ended with no job: %v", s.Err())
	return nil
}

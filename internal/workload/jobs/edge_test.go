package jobs_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// 17 jobs of 1,000,000 bytes, each within the payload limit and the
// batch within 1,000 jobs, made one 17 MB log entry that stopped the
// node. The batch is refused as too large, naming the limit and the size,
// and nothing is submitted.
func TestAPISubmitJobsOverBatchTotal(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	ctx := ctxT(t)
	reqs := make([]*jqpb.SubmitJobRequest, 17)
	for i := range reqs {
		reqs[i] = &jqpb.SubmitJobRequest{QueueName: "default", Payload: make([]byte, 1_000_000)}
	}
	_, err := c.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: reqs}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "17000000") || !strings.Contains(err.Error(), "4194304") {
		t.Fatalf("17 × 1,000,000 bytes: %v, want RESOURCE_EXHAUSTED naming 17000000 bytes and the limit 4194304", err)
	}
	st, err := c.admin.GetQueueStats(ctx, connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: "default"}))
	if err != nil || st.Msg.Stats.PendingCount != 0 {
		t.Fatalf("after the refusal: %v, %v; want no job", st, err)
	}
	// At the limit it is one batch.
	reqs = reqs[:4]
	for i := range reqs {
		reqs[i].Payload = make([]byte, jobs.MaxSubmitBatchBytes/4)
	}
	if _, err := c.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: reqs})); err != nil {
		t.Fatalf("a batch of exactly %d payload bytes: %v", jobs.MaxSubmitBatchBytes, err)
	}
}

// badValues are values no field of the jobs API takes: names and ids with
// a control character, a bidi override or a path, keys with NUL.
var badValues = map[string]string{
	"tab":         "a\tb",
	"NUL":         "a\x00b",
	"DEL":         "a\x7fb",
	"C1 control":  "a\u0085b",
	"RLO":         "invoice\u202efdp.exe",
	"LRI":         "a\u2066b",
	"newline":     "a\nb",
	"escape code": "a\x1b[31mb",
}

var badNames = map[string]string{
	"parent path": "../x",
	"slash":       "a/b",
	"backslash":   `a\b`,
	"dot dot":     "..",
}

// The same bad value gets INVALID_ARGUMENT over gRPC and over the Connect
// protocol with JSON on HTTP/1.1 (what curl and browsers use), from every
// call taking the field, and nothing is created.
func TestAPIFieldRulesAcrossTransports(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	overJSON := newJSONClients(c)
	ctx := ctxT(t)
	type call struct {
		name string
		do   func(cl *clients, v string) error
	}
	names := []call{
		{"CreateQueue.name", func(cl *clients, v string) error {
			_, err := cl.admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: v}))
			return err
		}},
		{"SubmitJob.queue_name", func(cl *clients, v string) error {
			_, err := cl.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: v}))
			return err
		}},
		{"RegisterWorker.worker_id", func(cl *clients, v string) error {
			_, err := cl.work.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{WorkerId: v}))
			return err
		}},
		{"RegisterWorker.queues", func(cl *clients, v string) error {
			_, err := cl.work.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{WorkerId: "w", Queues: []string{v}}))
			return err
		}},
	}
	texts := append(names, []call{
		{"SubmitJob.idempotency_key", func(cl *clients, v string) error {
			_, err := cl.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", IdempotencyKey: v}))
			return err
		}},
		{"SubmitJobs.idempotency_key", func(cl *clients, v string) error {
			_, err := cl.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: []*jqpb.SubmitJobRequest{{QueueName: "default", IdempotencyKey: v}}}))
			return err
		}},
		{"CancelJob.job_id", func(cl *clients, v string) error {
			_, err := cl.jobs.CancelJob(ctx, connect.NewRequest(&jqpb.CancelJobRequest{JobId: v}))
			return err
		}},
		{"RegisterWorker.hostname", func(cl *clients, v string) error {
			_, err := cl.work.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{WorkerId: "w", Hostname: v}))
			return err
		}},
	}...)
	check := func(f call, what, v string) {
		for _, cl := range []struct {
			transport string
			c         *clients
		}{{"gRPC", c}, {"Connect JSON", overJSON}} {
			if err := f.do(cl.c, v); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s %s (%q) over %s: %v, want INVALID_ARGUMENT", f.name, what, v, cl.transport, err)
			}
		}
	}
	for what, v := range badValues {
		for _, f := range texts {
			check(f, what, v)
		}
	}
	for what, v := range badNames {
		for _, f := range names {
			check(f, what, v)
		}
	}
	// An error message is what a worker reports, often a process's
	// stderr: lines and terminal colours are kept, NUL is refused.
	for _, cl := range []*clients{c, overJSON} {
		_, err := cl.work.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: "w", JobId: "j", ErrorMessage: "bad\x00"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("ReportResult with NUL in error_message: %v, want INVALID_ARGUMENT", err)
		}
		_, err = cl.work.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: "w", JobId: "j", ErrorMessage: "line 1\n\t\x1b[31mline 2\x1b[0m"}))
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			t.Errorf("ReportResult with a two-line, coloured error_message: %v, want it past the checks", err)
		}
	}
	qs, err := c.admin.ListQueues(ctx, connect.NewRequest(&jqpb.ListQueuesRequest{}))
	if err != nil || len(qs.Msg.Queues) != 1 {
		t.Errorf("queues after the refusals: %v, %v; want only default", qs, err)
	}
	st, err := c.admin.GetQueueStats(ctx, connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: "default"}))
	if err != nil || st.Msg.Stats.PendingCount != 0 {
		t.Errorf("jobs after the refusals: %v, %v; want none", st, err)
	}
	ws, err := c.admin.ListWorkers(ctx, connect.NewRequest(&jqpb.ListWorkersRequest{}))
	if err != nil || len(ws.Msg.Workers) != 0 {
		t.Errorf("workers after the refusals: %v, %v; want none", ws, err)
	}
}

// newJSONClients talks to c's server with the Connect protocol and JSON
// over HTTP/1.1.
func newJSONClients(c *clients) *clients {
	base := c.baseURL
	opts := []connect.ClientOption{connect.WithProtoJSON()}
	return &clients{
		jobs:   jqpbconnect.NewJobServiceClient(http.DefaultClient, base, opts...),
		work:   jqpbconnect.NewWorkerServiceClient(http.DefaultClient, base, opts...),
		admin:  jqpbconnect.NewAdminServiceClient(http.DefaultClient, base, opts...),
		engine: c.engine,
	}
}

// The largest legal SubmitJob and SubmitJobs, through the handlers to the
// log: the entries the log receives (command and envelope) are within
// cmdlog.MaxEntryBytes.
func TestAPIWorstSubmitsFitALogEntry(t *testing.T) {
	dir := t.TempDir()
	el := &apitest.EntryLog{Log: enginetest.OpenWAL(t, dir, 4)}
	eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: 4, Log: el}, &jobs.Workload{Partitions: 4})
	a := jobs.NewAPI(eng, jobs.NewHub(0))
	mux := http.NewServeMux()
	for _, s := range a.Handlers() {
		mux.Handle(s.Path, s.Handler)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() { a.Shutdown(); srv.Close(); eng.Close() })
	ctx := ctxT(t)
	c := jqpbconnect.NewJobServiceClient(h2c(), srv.URL, connect.WithGRPC())
	admin := jqpbconnect.NewAdminServiceClient(h2c(), srv.URL, connect.WithGRPC())
	long := func(n int) string { return strings.Repeat("é", n/2) + strings.Repeat("q", n%2) }
	queue := long(jobs.MaxNameLen)
	if _, err := admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: queue, MaxRetries: jobs.MaxMaxRetries, TtlSeconds: jobs.MaxTTLSeconds})); err != nil {
		t.Fatal(err)
	}
	check := func(rpc string) {
		t.Helper()
		n := el.TakeMax()
		if n == 0 || n > cmdlog.MaxEntryBytes {
			t.Fatalf("%s: largest log entry %d bytes, want 1 to %d", rpc, n, cmdlog.MaxEntryBytes)
		}
		t.Logf("%s: largest entry %d bytes", rpc, n)
	}
	check("CreateQueue")
	job := func(payload, i int) *jqpb.SubmitJobRequest {
		return &jqpb.SubmitJobRequest{QueueName: queue, Payload: make([]byte, payload), Priority: jobs.MaxPriority, MaxRetries: jobs.MaxMaxRetries,
			TtlSeconds: jobs.MaxTTLSeconds, IdempotencyKey: fmt.Sprintf("%06d", i) + long(jobs.MaxKeyLen-6)}
	}
	if _, err := c.SubmitJob(ctx, connect.NewRequest(job(jobs.MaxPayloadBytes, -1))); err != nil {
		t.Fatal(err)
	}
	check("SubmitJob")
	batch := make([]*jqpb.SubmitJobRequest, jobs.MaxSubmitBatch)
	for i := range batch {
		batch[i] = job(jobs.MaxSubmitBatchBytes/jobs.MaxSubmitBatch, i)
	}
	if _, err := c.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: batch})); err != nil {
		t.Fatal(err)
	}
	check("SubmitJobs")
}

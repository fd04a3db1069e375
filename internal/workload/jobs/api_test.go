package jobs_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// clients talk to a jobs API over a real engine and log, over h2c gRPC
// as jq's clients do.
type clients struct {
	jobs   jqpbconnect.JobServiceClient
	work   jqpbconnect.WorkerServiceClient
	admin  jqpbconnect.AdminServiceClient
	engine *engine.Engine
	api    *jobs.API
	// baseURL is the server's, for clients of other protocols.
	baseURL string
}

func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func newAPI(t *testing.T, lease time.Duration) *clients {
	t.Helper()
	return newAPIHub(t, lease, jobs.NewHub(0))
}

// newAPIHub is newAPI with the given worker registry.
func newAPIHub(t *testing.T, lease time.Duration, hub *jobs.Hub) *clients {
	t.Helper()
	const parts = 4
	eng := enginetest.APIEngine(t, engine.Options{Partitions: parts,
		Notify: func(_ int, wl uint8, v any) {
			if wl == jobs.WorkloadID {
				hub.Notify(v)
			}
		}}, &jobs.Workload{Partitions: parts})
	a := jobs.NewAPI(eng, hub).SetLease(lease)
	mux := http.NewServeMux()
	for _, s := range a.Handlers() {
		mux.Handle(s.Path, s.Handler)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() { a.Shutdown(); srv.Close(); eng.Close() })
	hc, rpcURL := h2c(), srv.URL
	if overGRPCGo(t) {
		rpcURL = serveGRPCGo(t, a)
	}
	return &clients{
		jobs:    jqpbconnect.NewJobServiceClient(hc, rpcURL, connect.WithGRPC()),
		work:    jqpbconnect.NewWorkerServiceClient(hc, rpcURL, connect.WithGRPC()),
		admin:   jqpbconnect.NewAdminServiceClient(hc, rpcURL, connect.WithGRPC()),
		engine:  eng,
		api:     a,
		baseURL: srv.URL,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (c *clients) submit(t *testing.T, req *jqpb.SubmitJobRequest) string {
	t.Helper()
	res, err := c.jobs.SubmitJob(ctxT(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("SubmitJob(%v): %v", req, err)
	}
	return res.Msg.JobId
}

func (c *clients) job(t *testing.T, id string) *jqpb.Job {
	t.Helper()
	res, err := c.jobs.GetJobStatus(ctxT(t), connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: id}))
	if err != nil {
		t.Fatalf("GetJobStatus(%s): %v", id, err)
	}
	return res.Msg.Job
}

// testWorker is a registered worker with an open stream whose
// assignments arrive on got.
type testWorker struct {
	id     string
	got    chan *jqpb.JobAssignment
	ended  chan error
	cancel context.CancelFunc
}

func (c *clients) worker(t *testing.T, id string, concurrency int32, acceptsCancel bool, queues ...string) *testWorker {
	t.Helper()
	ctx := ctxT(t)
	reg, err := c.work.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{WorkerId: id, Hostname: "test",
		Concurrency: concurrency, Queues: queues}))
	if err != nil {
		t.Fatal(err)
	}
	id = reg.Msg.WorkerId
	sctx, cancel := context.WithCancel(ctx)
	st, err := c.work.StreamJobs(sctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: id, AcceptsCancel: acceptsCancel}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &testWorker{id: id, got: make(chan *jqpb.JobAssignment, 1000), ended: make(chan error, 1), cancel: cancel}
	go func() {
		for st.Receive() {
			w.got <- st.Msg()
		}
		w.ended <- st.Err()
		st.Close()
	}()
	t.Cleanup(cancel)
	return w
}

func (w *testWorker) next(t *testing.T) *jqpb.JobAssignment {
	t.Helper()
	select {
	case a := <-w.got:
		return a
	case err := <-w.ended:
		t.Fatalf("worker %s: stream ended: %v", w.id, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("worker %s: no assignment in 10 s", w.id)
	}
	return nil
}

func (w *testWorker) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case a := <-w.got:
		t.Fatalf("worker %s got %v, want nothing", w.id, a)
	case <-time.After(d):
	}
}

func (c *clients) report(t *testing.T, w, job string, ok bool) error {
	t.Helper()
	_, err := c.work.ReportResult(ctxT(t), connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: w, JobId: job, Success: ok,
		Result: []byte("r"), ErrorMessage: map[bool]string{false: "boom"}[ok]}))
	return err
}

// A job goes to a waiting worker the moment it is submitted; the worker
// acks and reports, and the log shows every transition.
func TestAPILifecycle(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	w := c.worker(t, "w1", 4, true)
	w.none(t, 50*time.Millisecond)
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{"command":["true"]}`), Priority: 5, TtlSeconds: 60})
	a := w.next(t)
	if a.JobId != id || a.QueueName != "default" || string(a.Payload) != `{"command":["true"]}` || a.Priority != 5 || a.TtlSeconds != 60 || a.Cancel {
		t.Fatalf("assignment %v for job %s", a, id)
	}
	if j := c.job(t, id); j.Status != jqpb.JobStatus_ASSIGNED || j.WorkerId != "w1" {
		t.Fatalf("after push: %v", j)
	}
	if _, err := c.work.AckJob(ctxT(t), connect.NewRequest(&jqpb.AckJobRequest{WorkerId: "w1", JobId: id})); err != nil {
		t.Fatal(err)
	}
	if j := c.job(t, id); j.Status != jqpb.JobStatus_RUNNING || j.StartedAt == nil {
		t.Fatalf("after ack: %v", j)
	}
	if err := c.report(t, "w1", id, true); err != nil {
		t.Fatal(err)
	}
	j := c.job(t, id)
	if j.Status != jqpb.JobStatus_DONE || string(j.Result) != "r" || j.CompletedAt == nil || j.WorkerId != "w1" {
		t.Fatalf("after report: %v", j)
	}
	logs, err := c.jobs.GetJobLogs(ctxT(t), connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: id}))
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, e := range logs.Msg.Events {
		path = append(path, e.ToStatus.String())
	}
	if got := strings.Join(path, ">"); got != "PENDING>ASSIGNED>RUNNING>DONE" {
		t.Fatalf("log %s", got)
	}
	st, err := c.admin.GetQueueStats(ctxT(t), connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: "default"}))
	if err != nil || st.Msg.Stats.DoneCount != 1 || st.Msg.Stats.TotalProcessed != 1 {
		t.Fatalf("stats %v %v", st, err)
	}
	// A second report is refused: the job is no longer leased.
	if err := c.report(t, "w1", id, true); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("second report: %v", err)
	}
	sys, err := c.admin.GetSystemStatus(ctxT(t), connect.NewRequest(&jqpb.GetSystemStatusRequest{}))
	if err != nil || !sys.Msg.Healthy || sys.Msg.ActiveWorkers != 1 || len(sys.Msg.QueueStats) != 1 {
		t.Fatalf("system status %v %v", sys, err)
	}
}

// A worker that speaks only jq's protocol (no ack, no cancel) works: its
// report for an ASSIGNED job is valid.
func TestAPIJQWorker(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	w := c.worker(t, "", 1, false)
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	a := w.next(t)
	j := c.job(t, id)
	if err := c.report(t, j.WorkerId, a.JobId, false); err != nil {
		t.Fatal(err)
	}
	if j := c.job(t, id); j.Status != jqpb.JobStatus_FAILED || j.ErrorMessage != "boom" {
		t.Fatalf("after failure: %v", j)
	}
}

// Concurrency is the number of unreported jobs a worker holds: the rest
// wait, in priority order, until a report frees a slot.
func TestAPIConcurrencyAndPriority(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	var ids []string
	for i := range 5 {
		ids = append(ids, c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Priority: int32(i)}))
	}
	w := c.worker(t, "w", 2, false)
	a1, a2 := w.next(t), w.next(t)
	if a1.JobId != ids[4] || a2.JobId != ids[3] {
		t.Fatalf("first two pushed: %s %s, want the priority 4 and 3 jobs", a1.JobId, a2.JobId)
	}
	w.none(t, 100*time.Millisecond)
	if err := c.report(t, "w", a1.JobId, true); err != nil {
		t.Fatal(err)
	}
	if a := w.next(t); a.JobId != ids[2] {
		t.Fatalf("after a report: %s, want %s", a.JobId, ids[2])
	}
	w.none(t, 100*time.Millisecond)
}

// A job whose worker stops heartbeating is pushed to another worker when
// its lease runs out; heartbeats keep a lease.
func TestAPILeaseExpiry(t *testing.T) {
	// Heartbeats a tenth of the lease apart outlast the lease by half
	// again: a busy machine that delays one still leaves a wide margin.
	const lease = time.Second
	c := newAPI(t, lease)
	w1 := c.worker(t, "w1", 1, false)
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	w1.next(t)
	for range 15 {
		time.Sleep(lease / 10)
		if _, err := c.work.Heartbeat(ctxT(t), connect.NewRequest(&jqpb.HeartbeatRequest{WorkerId: "w1", ActiveJobCount: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if j := c.job(t, id); j.Status != jqpb.JobStatus_ASSIGNED {
		t.Fatalf("heartbeats did not keep the lease: %v", j)
	}
	w1.cancel()
	w2 := c.worker(t, "w2", 1, false)
	if a := w2.next(t); a.JobId != id {
		t.Fatalf("w2 got %s", a.JobId)
	}
	if j := c.job(t, id); j.RetryCount != 1 || j.WorkerId != "w2" {
		t.Fatalf("after expiry: %v", j)
	}
	if err := c.report(t, "w1", id, true); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("late report of the first worker: %v", err)
	}
}

// Cancelling a running job tells its worker on the stream; the job ends
// DEAD_LETTERED when the worker reports.
func TestAPICancelRunning(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	w := c.worker(t, "w", 2, true)
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	w.next(t)
	if _, err := c.work.AckJob(ctxT(t), connect.NewRequest(&jqpb.AckJobRequest{WorkerId: "w", JobId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.jobs.CancelJob(ctxT(t), connect.NewRequest(&jqpb.CancelJobRequest{JobId: id})); err != nil {
		t.Fatal(err)
	}
	if a := w.next(t); !a.Cancel || a.JobId != id {
		t.Fatalf("want a cancel order for %s, got %v", id, a)
	}
	if err := c.report(t, "w", id, false); err != nil {
		t.Fatal(err)
	}
	if j := c.job(t, id); j.Status != jqpb.JobStatus_DEAD_LETTERED {
		t.Fatalf("after cancel and report: %v", j)
	}
	// A pending job is cancelled at once.
	id2 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", NotBefore: timestamppb.New(time.Now().Add(time.Hour))})
	if _, err := c.jobs.CancelJob(ctxT(t), connect.NewRequest(&jqpb.CancelJobRequest{JobId: id2})); err != nil {
		t.Fatal(err)
	}
	if j := c.job(t, id2); j.Status != jqpb.JobStatus_DEAD_LETTERED {
		t.Fatalf("cancelled pending job: %v", j)
	}
}

// Drain ends the stream cleanly, shutdown with ABORTED; deregistering
// gives the worker's jobs back at once.
func TestAPIDrainShutdownDeregister(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	w := c.worker(t, "w", 1, false)
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	w.next(t)
	if _, err := c.admin.DrainWorker(ctxT(t), connect.NewRequest(&jqpb.DrainWorkerRequest{WorkerId: "w"})); err != nil {
		t.Fatal(err)
	}
	if err := <-w.ended; err != nil {
		t.Fatalf("drained stream ended with %v, want a clean end", err)
	}
	ws, err := c.admin.ListWorkers(ctxT(t), connect.NewRequest(&jqpb.ListWorkersRequest{}))
	if err != nil || len(ws.Msg.Workers) != 1 || ws.Msg.Workers[0].Status != jqpb.WorkerStatus_DRAINING {
		t.Fatalf("workers %v %v", ws, err)
	}
	if _, err := c.work.Deregister(ctxT(t), connect.NewRequest(&jqpb.DeregisterRequest{WorkerId: "w"})); err != nil {
		t.Fatal(err)
	}
	if j := c.job(t, id); j.Status != jqpb.JobStatus_PENDING || j.RetryCount != 0 {
		t.Fatalf("after deregister: %v", j)
	}
	w2 := c.worker(t, "w2", 1, false)
	if a := w2.next(t); a.JobId != id {
		t.Fatalf("w2 got %v", a)
	}
	if _, err := c.admin.ShutdownWorker(ctxT(t), connect.NewRequest(&jqpb.ShutdownWorkerRequest{WorkerId: "w2"})); err != nil {
		t.Fatal(err)
	}
	if err := <-w2.ended; connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("shut-down stream ended with %v, want ABORTED", err)
	}
	if _, err := c.admin.DrainWorker(ctxT(t), connect.NewRequest(&jqpb.DrainWorkerRequest{WorkerId: "nobody"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("drain of an unknown worker: %v", err)
	}
}

// Idempotency keys and batches.
func TestAPISubmitKeysAndBatches(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	a := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", IdempotencyKey: "k"})
	if b := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", IdempotencyKey: "k", Payload: []byte("other")}); b != a {
		t.Fatalf("repeat of a key: %s, want %s", b, a)
	}
	res, err := c.jobs.SubmitJobs(ctxT(t), connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: []*jqpb.SubmitJobRequest{
		{QueueName: "default"}, {QueueName: "default", IdempotencyKey: "k"}, {QueueName: "default", Priority: 9}}}))
	if err != nil {
		t.Fatal(err)
	}
	if ids := res.Msg.JobIds; len(ids) != 3 || ids[1] != a || ids[0] == ids[2] {
		t.Fatalf("batch ids %v", ids)
	}
	list, err := c.jobs.ListJobs(ctxT(t), connect.NewRequest(&jqpb.ListJobsRequest{QueueName: "default", Limit: 2}))
	if err != nil || len(list.Msg.Jobs) != 2 || list.Msg.NextPageToken == "" || list.Msg.Jobs[0].JobId != a {
		t.Fatalf("list %v %v", list, err)
	}
	rest, err := c.jobs.ListJobs(ctxT(t), connect.NewRequest(&jqpb.ListJobsRequest{QueueName: "default", PageToken: list.Msg.NextPageToken}))
	if err != nil || len(rest.Msg.Jobs) != 1 || rest.Msg.NextPageToken != "" {
		t.Fatalf("second page %v %v", rest, err)
	}
}

// Bad input gets the right code, a message naming the problem, and
// changes nothing.
func TestAPIBadInput(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	ctx := ctxT(t)
	if _, err := c.admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: "full"})); err != nil {
		t.Fatal(err)
	}
	keep := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "full"})
	big := make([]byte, jobs.MaxPayloadBytes+1)
	cases := []struct {
		name string
		call func() error
		code connect.Code
		msg  string
	}{
		{"priority 10", func() error {
			_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Priority: 10}))
			return err
		}, connect.CodeInvalidArgument, "priority"},
		{"negative retries", func() error {
			_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", MaxRetries: -1}))
			return err
		}, connect.CodeInvalidArgument, "max_retries"},
		{"negative ttl", func() error {
			_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", TtlSeconds: -1}))
			return err
		}, connect.CodeInvalidArgument, "ttl_seconds"},
		{"empty queue", func() error {
			_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{}))
			return err
		}, connect.CodeInvalidArgument, "queue_name"},
		{"unknown queue", func() error {
			_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "nope"}))
			return err
		}, connect.CodeNotFound, `"nope"`},
		{"huge payload", func() error {
			_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: big}))
			return err
		}, connect.CodeResourceExhausted, "payload"},
		{"batch with a bad job", func() error {
			_, err := c.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: []*jqpb.SubmitJobRequest{
				{QueueName: "default"}, {QueueName: "default", Priority: -1}}}))
			return err
		}, connect.CodeInvalidArgument, "jobs[1]"},
		{"batch over two queues", func() error {
			_, err := c.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: []*jqpb.SubmitJobRequest{
				{QueueName: "default"}, {QueueName: "full"}}}))
			return err
		}, connect.CodeInvalidArgument, "one queue"},
		{"unknown job", func() error {
			_, err := c.jobs.GetJobStatus(ctx, connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: "x"}))
			return err
		}, connect.CodeNotFound, `"x"`},
		{"retry a pending job", func() error {
			_, err := c.jobs.RetryJob(ctx, connect.NewRequest(&jqpb.RetryJobRequest{JobId: keep}))
			return err
		}, connect.CodeFailedPrecondition, "PENDING"},
		{"delete a non-empty queue", func() error {
			_, err := c.admin.DeleteQueue(ctx, connect.NewRequest(&jqpb.DeleteQueueRequest{Name: "full"}))
			return err
		}, connect.CodeFailedPrecondition, "full"},
		{"delete the default queue", func() error {
			_, err := c.admin.DeleteQueue(ctx, connect.NewRequest(&jqpb.DeleteQueueRequest{Name: "default", Force: true}))
			return err
		}, connect.CodeFailedPrecondition, "default"},
		{"create an existing queue", func() error {
			_, err := c.admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: "full", MaxRetries: 7}))
			return err
		}, connect.CodeAlreadyExists, "full"},
		{"list with limit 101", func() error {
			_, err := c.jobs.ListJobs(ctx, connect.NewRequest(&jqpb.ListJobsRequest{QueueName: "default", Limit: 101}))
			return err
		}, connect.CodeInvalidArgument, "limit"},
		{"bad page token", func() error {
			_, err := c.jobs.ListJobs(ctx, connect.NewRequest(&jqpb.ListJobsRequest{QueueName: "default", PageToken: "zz"}))
			return err
		}, connect.CodeInvalidArgument, "token"},
		{"report by a stranger", func() error {
			_, err := c.work.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: "w", JobId: keep, Success: true}))
			return err
		}, connect.CodeFailedPrecondition, "not leased"},
		{"stream before register", func() error {
			st, err := c.work.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: "ghost"}))
			if err != nil {
				return err
			}
			defer st.Close()
			for st.Receive() {
			}
			return st.Err()
		}, connect.CodeNotFound, "RegisterWorker"},
		{"concurrency 5000", func() error {
			_, err := c.work.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Concurrency: 5000}))
			return err
		}, connect.CodeInvalidArgument, "concurrency"},
	}
	for _, tc := range cases {
		err := tc.call()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != tc.code || !strings.Contains(ce.Message(), tc.msg) {
			t.Errorf("%s: %v, want %v mentioning %q", tc.name, err, tc.code, tc.msg)
		}
	}
	for _, q := range []string{"default", "full"} {
		st, err := c.admin.GetQueueStats(ctx, connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: q}))
		want := int64(0)
		if q == "full" {
			want = 1
		}
		if err != nil || st.Msg.Stats.PendingCount != want {
			t.Errorf("queue %s after refusals: %v %v", q, st, err)
		}
	}
}

// A second stream of one worker replaces the first, which ends with
// ALREADY_EXISTS (not ABORTED, which orders a shutdown); jobs go to the
// newer one.
func TestAPIStreamReplaced(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	old := c.worker(t, "w", 1, false)
	cur := c.worker(t, "w", 1, false)
	if err := <-old.ended; connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("replaced stream ended with %v, want ALREADY_EXISTS", err)
	}
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	if a := cur.next(t); a.JobId != id {
		t.Fatalf("newer stream got %v", a)
	}
}

// Random calls with random, often wrong, arguments: none may fail with
// INTERNAL or UNKNOWN (a panic or an unmapped error), and afterwards every
// queue's counts add up to the jobs it lists.
func TestAPIRandomCalls(t *testing.T) {
	c := newAPI(t, 200*time.Millisecond)
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(7, 8))
	// (Invalid UTF-8 cannot be sent: the client's protobuf refuses it.)
	queues := []string{"default", "q1", "", "nope", strings.Repeat("x", 300)}
	var ids []string
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	job := func() string {
		if len(ids) > 0 && rng.IntN(4) > 0 {
			return pick(ids)
		}
		return pick([]string{"", "x", strings.Repeat("j", 200)})
	}
	w := c.worker(t, "w", 3, true, "default")
	go func() { // a worker that reports about half of what it gets
		for a := range w.got {
			if !a.Cancel && a.JobId[0]%2 == 0 {
				c.work.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: "w", JobId: a.JobId, Success: a.Priority%2 == 0}))
			}
		}
	}()
	n := map[string]int{}
	for range 1500 {
		var err error
		switch rng.IntN(12) {
		case 0, 1, 2:
			var res *connect.Response[jqpb.SubmitJobResponse]
			res, err = c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: pick(queues), Priority: int32(rng.IntN(14) - 2),
				MaxRetries: int32(rng.IntN(6) - 1), TtlSeconds: int32(rng.IntN(5) - 1), IdempotencyKey: pick([]string{"", "", "k1", "k2"}),
				NotBefore: []*timestamppb.Timestamp{nil, nil, timestamppb.New(time.Now().Add(50 * time.Millisecond)), {Seconds: -1 << 40}}[rng.IntN(4)]}))
			if err == nil {
				ids = append(ids, res.Msg.JobId)
			}
		case 3:
			var reqs []*jqpb.SubmitJobRequest
			for range rng.IntN(4) {
				reqs = append(reqs, &jqpb.SubmitJobRequest{QueueName: pick(queues[:2]), Priority: int32(rng.IntN(11))})
			}
			_, err = c.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: reqs}))
		case 4:
			_, err = c.jobs.CancelJob(ctx, connect.NewRequest(&jqpb.CancelJobRequest{JobId: job()}))
		case 5:
			_, err = c.jobs.RetryJob(ctx, connect.NewRequest(&jqpb.RetryJobRequest{JobId: job()}))
		case 6:
			_, err = c.jobs.GetJobLogs(ctx, connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: job()}))
		case 7:
			_, err = c.jobs.ListJobs(ctx, connect.NewRequest(&jqpb.ListJobsRequest{QueueName: pick(queues), Status: jqpb.JobStatus(rng.IntN(9) - 1),
				Limit: int32(rng.IntN(120) - 5), PageToken: pick([]string{"", "", "3", "-1", "x"})}))
		case 8:
			_, err = c.work.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: pick([]string{"w", "v", ""}), JobId: job(), Success: rng.IntN(2) == 0}))
		case 9:
			_, err = c.work.AckJob(ctx, connect.NewRequest(&jqpb.AckJobRequest{WorkerId: pick([]string{"w", "v", ""}), JobId: job()}))
		case 10:
			switch rng.IntN(4) {
			case 0:
				_, err = c.admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: pick(queues), MaxRetries: int32(rng.IntN(4) - 1), TtlSeconds: int32(rng.IntN(3))}))
			case 1:
				_, err = c.admin.DeleteQueue(ctx, connect.NewRequest(&jqpb.DeleteQueueRequest{Name: pick(queues[1:]), Force: rng.IntN(2) == 0}))
			case 2:
				_, err = c.admin.PauseQueue(ctx, connect.NewRequest(&jqpb.PauseQueueRequest{Name: pick(queues)}))
			default:
				_, err = c.admin.ResumeQueue(ctx, connect.NewRequest(&jqpb.ResumeQueueRequest{Name: pick(queues)}))
			}
		default:
			_, err = c.work.Heartbeat(ctx, connect.NewRequest(&jqpb.HeartbeatRequest{WorkerId: pick([]string{"w", "v", ""})}))
		}
		if err == nil {
			n["ok"]++
		} else {
			n[connect.CodeOf(err).String()]++
		}
		if code := connect.CodeOf(err); err != nil && (code == connect.CodeInternal || code == connect.CodeUnknown) {
			t.Fatalf("call failed with %v", err)
		}
	}
	t.Logf("outcomes: %v", n)
	qs, err := c.admin.ListQueues(ctx, connect.NewRequest(&jqpb.ListQueuesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.Msg.Queues {
		st, err := c.admin.GetQueueStats(ctx, connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: q.Name}))
		if err != nil {
			t.Fatal(err)
		}
		listed := 0
		for page := ""; ; {
			res, err := c.jobs.ListJobs(ctx, connect.NewRequest(&jqpb.ListJobsRequest{QueueName: q.Name, Limit: 100, PageToken: page}))
			if err != nil {
				t.Fatal(err)
			}
			listed += len(res.Msg.Jobs)
			if page = res.Msg.NextPageToken; page == "" {
				break
			}
		}
		s := st.Msg.Stats
		if sum := s.PendingCount + s.RunningCount + s.FailedCount + s.DoneCount + s.DeadLetterCount; sum != int64(listed) {
			t.Errorf("queue %s: counts add up to %d, %d jobs listed (%v)", q.Name, sum, listed, s)
		}
	}
}

// A partition's unfinished jobs hold at most their payload memory: a
// submit or batch past it is refused RESOURCE_EXHAUSTED, submitting
// nothing, and once a job finishes its payload's room is free again.
func TestAPIPayloadMemory(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	c.api.SetPayloadMemory(3 * jobs.MaxPayloadBytes)
	ctx := ctxT(t)
	big := make([]byte, jobs.MaxPayloadBytes)
	for range 3 {
		c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: big})
	}
	_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: big}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "payloads") {
		t.Fatalf("a fourth job of the largest payload: %v, want RESOURCE_EXHAUSTED naming the payloads' limit", err)
	}
	if d, ok := api.GRPCRetryDelay(err); !ok || d != api.MinRetryDelay {
		t.Errorf("the payloads' refusal asks for a delay of %v (%v), want %v: it passes as jobs finish", d, ok, api.MinRetryDelay)
	}
	_, err = c.jobs.SubmitJobs(ctx, connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: []*jqpb.SubmitJobRequest{
		{QueueName: "default", Payload: []byte("a")}, {QueueName: "default", Payload: []byte("b")}}}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "nothing was submitted") {
		t.Fatalf("a batch past the limit: %v, want RESOURCE_EXHAUSTED submitting nothing", err)
	}
	if _, ok := api.GRPCRetryDelay(err); !ok {
		t.Errorf("a batch past the payloads' limit asks for no delay")
	}
	stats, err := c.admin.GetQueueStats(ctx, connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: "default"}))
	if err != nil || stats.Msg.Stats.PendingCount != 3 {
		t.Fatalf("queue stats %v, %v; want the 3 jobs taken and nothing else", stats, err)
	}
	w := c.worker(t, "w", 1, false, "default")
	a := w.next(t)
	if err := c.report(t, w.id, a.JobId, true); err != nil {
		t.Fatal(err)
	}
	c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: big})
}

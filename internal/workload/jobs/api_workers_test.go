package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/workload/jobs"
)

func (c *clients) register(t *testing.T, id string, concurrency int32, queues ...string) error {
	t.Helper()
	_, err := c.work.RegisterWorker(ctxT(t), connect.NewRequest(&jqpb.RegisterWorkerRequest{WorkerId: id, Hostname: "test",
		Concurrency: concurrency, Queues: queues}))
	return err
}

// stream opens a StreamJobs of a registered worker; with declare, it says
// (Surge's extension) that its process holds held.
func (c *clients) stream(t *testing.T, id string, declare bool, held ...string) *testWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	req := &jqpb.StreamJobsRequest{WorkerId: id, AcceptsCancel: true}
	if declare {
		req.Held = &jqpb.HeldJobs{JobIds: held}
	}
	st, err := c.work.StreamJobs(ctx, connect.NewRequest(req))
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

// kill ends the worker's stream from its side, as a killed process does.
func (w *testWorker) kill(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case <-w.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("worker %s: stream did not end", w.id)
	}
}

func (c *clients) beat(t *testing.T, id string, declare bool, held ...string) {
	t.Helper()
	req := &jqpb.HeartbeatRequest{WorkerId: id, ActiveJobCount: int32(len(held))}
	if declare {
		req.Held = &jqpb.HeldJobs{JobIds: held}
	}
	if _, err := c.work.Heartbeat(ctxT(t), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
}

func (c *clients) reasons(t *testing.T, id string) []string {
	t.Helper()
	res, err := c.jobs.GetJobLogs(ctxT(t), connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: id}))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range res.Msg.Events {
		out = append(out, e.Reason)
	}
	return out
}

// Issue 17's repro with jq's protocol: a worker killed while it holds a
// job comes back under the same id; its new stream is offered the job
// again (not left holding a slot nobody uses), and new jobs flow. The
// lease is an hour, so nothing here waits for one to run out.
func TestAPIRestartedJQWorkerIsOfferedItsJobAgain(t *testing.T) {
	c := newAPI(t, time.Hour)
	w := c.worker(t, "w1", 1, false)
	id1 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	if a := w.next(t); a.JobId != id1 {
		t.Fatalf("got %v", a)
	}
	w.kill(t)
	w2 := c.worker(t, "w1", 1, false)
	if a := w2.next(t); a.JobId != id1 {
		t.Fatalf("the restarted worker got %v, want %s again", a, id1)
	}
	if j := c.job(t, id1); j.Status != jqpb.JobStatus_ASSIGNED || j.WorkerId != "w1" || j.RetryCount != 1 {
		t.Fatalf("offered again: %v", j)
	}
	if err := c.report(t, "w1", id1, true); err != nil {
		t.Fatal(err)
	}
	id2 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	if a := w2.next(t); a.JobId != id2 {
		t.Fatalf("second job: got %v", a)
	}
}

// The same with Surge's worker protocol: the restarted process declares
// it holds nothing, so the job it had started goes back at once (counted
// as a lost attempt) and is pushed again; a reconnect that declares its
// job keeps it without a second push.
func TestAPIRestartedSurgeWorkerGivesBackWhatItLost(t *testing.T) {
	c := newAPI(t, time.Hour)
	if err := c.register(t, "w1", 1); err != nil {
		t.Fatal(err)
	}
	s1 := c.stream(t, "w1", true)
	id1 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	if a := s1.next(t); a.JobId != id1 {
		t.Fatalf("got %v", a)
	}
	if _, err := c.work.AckJob(ctxT(t), connect.NewRequest(&jqpb.AckJobRequest{WorkerId: "w1", JobId: id1})); err != nil {
		t.Fatal(err)
	}
	s1.kill(t)
	if err := c.register(t, "w1", 1); err != nil {
		t.Fatal(err)
	}
	s2 := c.stream(t, "w1", true)
	if a := s2.next(t); a.JobId != id1 {
		t.Fatalf("the restarted worker got %v, want %s again", a, id1)
	}
	if j := c.job(t, id1); j.RetryCount != 1 || !slices.Contains(c.reasons(t, id1), jobs.ReasonWorkerLost) {
		t.Fatalf("given back: %v, log %v", j, c.reasons(t, id1))
	}
	// A reconnect of the same process keeps what it declares.
	s3 := c.stream(t, "w1", true, id1)
	if err := <-s2.ended; connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("replaced stream: %v", err)
	}
	s3.none(t, 200*time.Millisecond)
	if err := c.report(t, "w1", id1, true); err != nil {
		t.Fatalf("report after a reconnect that kept the job: %v", err)
	}
	id2 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	if a := s3.next(t); a.JobId != id2 {
		t.Fatalf("second job: got %v", a)
	}
}

// waitRetried polls until the job's lease has run out at least once.
func (c *clients) waitRetried(t *testing.T, id string, beat func()) *jqpb.Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		beat()
		if j := c.job(t, id); j.RetryCount > 0 {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still leased after 20 s: %v", id, c.job(t, id))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A heartbeat extends only the jobs its worker holds: named ones, or
// with jq's protocol those of its live stream. Before issue 17 each beat
// extended every lease of the id, so a job pushed to a dead stream was
// held for as long as the id kept beating.
func TestAPIHeartbeatsExtendOnlyHeldJobs(t *testing.T) {
	const lease = 2 * time.Second
	c := newAPI(t, lease)
	w := c.worker(t, "w1", 1, false)
	id1 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	w.next(t)
	w.kill(t)
	c.waitRetried(t, id1, func() { c.beat(t, "w1", false, "x") })

	// Surge's protocol, on a queue of its own (id1 waits in default).
	if _, err := c.admin.CreateQueue(ctxT(t), connect.NewRequest(&jqpb.CreateQueueRequest{Name: "q2"})); err != nil {
		t.Fatal(err)
	}
	if err := c.register(t, "w2", 1, "q2"); err != nil {
		t.Fatal(err)
	}
	s := c.stream(t, "w2", true)
	id2 := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "q2"})
	if a := s.next(t); a.JobId != id2 {
		t.Fatalf("w2 got %v", a)
	}
	// Named, it stays leased over several leases.
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 8) {
		c.beat(t, "w2", true, id2)
	}
	if j := c.job(t, id2); j.Status != jqpb.JobStatus_ASSIGNED || j.RetryCount != 0 {
		t.Fatalf("named in every beat: %v", j)
	}
	// Not named: its lease runs out although the worker beats.
	c.waitRetried(t, id2, func() { c.beat(t, "w2", true) })
}

// --max-workers counts workers that are there: 50 register/deregister
// rounds with a limit of 50 leave room for the next worker.
func TestAPIDeregisteredWorkersFreeTheirPlace(t *testing.T) {
	c := newAPIHub(t, 30*time.Second, jobs.NewHub(50))
	for i := range 50 {
		id := fmt.Sprintf("w%d", i)
		if err := c.register(t, id, 1); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := c.work.Deregister(ctxT(t), connect.NewRequest(&jqpb.DeregisterRequest{WorkerId: id})); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		if err := c.register(t, fmt.Sprintf("n%d", i), 1); err != nil {
			t.Fatalf("worker %d after 50 rounds: %v", i, err)
		}
	}
	if err := c.register(t, "one-too-many", 1); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("51st live worker: %v", err)
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Add(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// A worker that went offline (no stream, no heartbeat within a lease)
// keeps its place for the grace, then is forgotten; one with an open
// stream is never forgotten. Time is the registry's clock, moved by hand.
func TestAPIOfflineWorkerForgottenAfterGrace(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	hub := jobs.NewHub(2)
	hub.SetClock(clock.Now)
	c := newAPIHub(t, 30*time.Second, hub)
	if err := c.register(t, "streaming", 1); err != nil {
		t.Fatal(err)
	}
	c.stream(t, "streaming", true)
	if err := c.register(t, "silent", 1); err != nil {
		t.Fatal(err)
	}
	status := func() map[string]jqpb.WorkerStatus {
		ws, err := c.admin.ListWorkers(ctxT(t), connect.NewRequest(&jqpb.ListWorkersRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]jqpb.WorkerStatus{}
		for _, w := range ws.Msg.Workers {
			out[w.WorkerId] = w.Status
		}
		return out
	}
	// The stream is registered asynchronously: wait until it counts.
	deadline := time.Now().Add(20 * time.Second)
	for status()["streaming"] != jqpb.WorkerStatus_ONLINE && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	clock.Add(31 * time.Second) // a lease and a bit: silent is OFFLINE
	if st := status(); st["silent"] != jqpb.WorkerStatus_OFFLINE || st["streaming"] != jqpb.WorkerStatus_ONLINE {
		t.Fatalf("after a lease: %v", st)
	}
	if err := c.register(t, "new", 1); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("within the grace: %v", err)
	}
	clock.Add(jobs.DefaultWorkerGrace)
	if err := c.register(t, "new", 1); err != nil {
		t.Fatalf("after the grace: %v", err)
	}
	if st := status(); len(st) != 2 || st["streaming"] != jqpb.WorkerStatus_ONLINE || st["silent"] != 0 {
		t.Fatalf("after the grace: %v", st)
	}
}

// A job cancelled while its worker had no stream is cancelled again on
// the stream the worker reconnects with, if it still holds the job.
func TestAPICancelWhileDisconnectedReachesTheNextStream(t *testing.T) {
	c := newAPI(t, time.Hour)
	if err := c.register(t, "w1", 1); err != nil {
		t.Fatal(err)
	}
	s1 := c.stream(t, "w1", true)
	id := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	s1.next(t)
	if _, err := c.work.AckJob(ctxT(t), connect.NewRequest(&jqpb.AckJobRequest{WorkerId: "w1", JobId: id})); err != nil {
		t.Fatal(err)
	}
	s1.kill(t) // the connection drops; the process runs on
	if _, err := c.jobs.CancelJob(ctxT(t), connect.NewRequest(&jqpb.CancelJobRequest{JobId: id})); err != nil {
		t.Fatal(err)
	}
	s2 := c.stream(t, "w1", true, id)
	if a := s2.next(t); !a.Cancel || a.JobId != id {
		t.Fatalf("reconnected stream got %v, want a cancel order for %s", a, id)
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// startNullInProcess serves the do-nothing handler on a loopback port with
// the listener `surge bench nullserver` uses, until the test ends.
func startNullInProcess(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveUntil(ctx, api.NewServer(ln.Addr().String(), NullHandler(), api.Limits{}, nil), ln)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("null server: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func testJobsOptions() JobsOptions {
	return JobsOptions{Phase: JobsPhaseBoth, Duration: 700 * time.Millisecond, Concurrency: 16, Connections: 2, SubmitWork: true,
		Rate: 400, Batch: 1, MaxInflight: 50, Workers: 2, WorkerConc: 8, Drain: 5 * time.Second}
}

func TestJobsPhasesAgainstTheNullServer(t *testing.T) {
	ctx := context.Background()
	noCPU := func() (float64, error) { return 0, nil }
	for _, c := range []struct {
		phase string
		batch int
		ack   bool
	}{{JobsPhaseSubmit, 1, false}, {JobsPhaseE2E, 1, true}, {JobsPhaseE2E, 4, false}} {
		// A fresh server per phase, as RunJobs starts: jobs left in one
		// would be executed in the next.
		base := startNullInProcess(t)
		o := testJobsOptions()
		o.Batch, o.Ack = c.batch, c.ack
		if err := o.validate(); err != nil {
			t.Fatal(err)
		}
		rep, err := newJobsRun(o, c.phase).measure(ctx, c.phase, connectDialer(base), noCPU)
		if err != nil {
			t.Fatalf("%s: %v", c.phase, err)
		}
		if n := rep.errors(); n > 0 || rep.ResourceExhausted > 0 {
			t.Fatalf("%s: %d errors: %v %v %v", c.phase, n, rep.SubmitErrors, rep.WorkerErrorsByCode, rep.ErrorSamples)
		}
		if rep.Submitted == 0 || rep.Executed == 0 || rep.SubmitCall.Count == 0 {
			t.Fatalf("%s: submitted %d, executed %d, %d submit latencies", c.phase, rep.Submitted, rep.Executed, rep.SubmitCall.Count)
		}
		if c.phase == JobsPhaseSubmit {
			if rep.SubmitCall.Count != rep.Submitted {
				t.Errorf("submit: %d latencies for %d submits", rep.SubmitCall.Count, rep.Submitted)
			}
			continue
		}
		// Every job the schedule offered was sent or counted as not sent
		// (however busy the machine: how many were sent is timing), and
		// each sent one reached a worker with its submit time and was
		// reported.
		want := int64(o.Rate * o.Duration.Seconds())
		if rep.Submitted+rep.NotSent < want-int64(o.Batch) {
			t.Errorf("e2e batch %d: submitted %d, not sent %d, want about %d", c.batch, rep.Submitted, rep.NotSent, want)
		}
		if rep.Unfinished != 0 || rep.Executed != rep.Submitted {
			t.Errorf("e2e batch %d: executed %d of %d", c.batch, rep.Executed, rep.Submitted)
		}
		if rep.SubmitToStart.Count != rep.Executed || rep.SubmitToDone.Count != rep.Executed {
			t.Errorf("e2e batch %d: %d start and %d done latencies for %d jobs", c.batch, rep.SubmitToStart.Count, rep.SubmitToDone.Count, rep.Executed)
		}
		if rep.SubmitToDone.P50Us < rep.SubmitToStart.P50Us {
			t.Errorf("e2e batch %d: done p50 %d µs before start p50 %d µs", c.batch, rep.SubmitToDone.P50Us, rep.SubmitToStart.P50Us)
		}
	}
}

// The do-nothing server must push no more than a worker's concurrency of
// unreported jobs, as the real one does, or the e2e phase would measure a
// different protocol against it.
func TestNullJobsRespectsWorkerConcurrency(t *testing.T) {
	base := startNullInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := newH2CClient()
	defer hc.CloseIdleConnections()
	w := jqpbconnect.NewWorkerServiceClient(hc, base, connect.WithGRPC())
	j := jqpbconnect.NewJobServiceClient(hc, base, connect.WithGRPC())
	reg, err := w.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Concurrency: 2}))
	if err != nil {
		t.Fatal(err)
	}
	id := reg.Msg.WorkerId
	if len(id) != 36 {
		t.Fatalf("worker id %q is not a UUID", id)
	}
	for range 3 {
		resp, err := j.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: jobsQueue, Payload: jobsPayload}))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Msg.JobId) != 36 || resp.Msg.JobId[14] != '4' {
			t.Fatalf("job id %q is not a version-4 UUID", resp.Msg.JobId)
		}
	}
	stream, err := w.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: id}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	go func() {
		for stream.Receive() {
			got <- stream.Msg().JobId
		}
	}()
	first := []string{<-got, <-got}
	select {
	case x := <-got:
		t.Fatalf("a third job %s pushed while two were unreported", x)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := w.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: id, JobId: first[0], Success: true})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no third job after a report gave a slot back")
	}
	if _, err := w.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: "nobody"})); err == nil {
		// The error of a server stream arrives with its first receive.
		s, _ := w.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: "nobody"}))
		if s.Receive() || connect.CodeOf(s.Err()) != connect.CodeNotFound {
			t.Errorf("stream of an unregistered worker: %v, want NOT_FOUND", s.Err())
		}
	}
	_ = stream.Close()
}

func TestPayloadTime(t *testing.T) {
	p := appendTimedPayload(nil, 1234567890123)
	if !json.Valid(p) || !strings.HasPrefix(string(p), `{"command":["echo","bench"],`) {
		t.Fatalf("payload %s", p)
	}
	if ns, ok := payloadTime(p); !ok || ns != 1234567890123 {
		t.Errorf("payloadTime(%s) = %d, %v", p, ns, ok)
	}
	if _, ok := payloadTime(jobsPayload); ok {
		t.Errorf("the peer's payload %s has no time", jobsPayload)
	}
	if allocs := testing.AllocsPerRun(100, func() { p = appendTimedPayload(p[:0], 42) }); allocs != 0 {
		t.Errorf("appendTimedPayload into a buffer allocates %.0f times", allocs)
	}
}

func TestJobsOptionsValidate(t *testing.T) {
	ok := testJobsOptions()
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]func(*JobsOptions){
		"phase":                     func(o *JobsOptions) { o.Phase = "all" },
		"batch":                     func(o *JobsOptions) { o.Batch = 1001 },
		"rate":                      func(o *JobsOptions) { o.Rate = 0 },
		"workers":                   func(o *JobsOptions) { o.Workers = 0 },
		"target":                    func(o *JobsOptions) { o.Target = "127.0.0.1:8080" },
		"worker-con":                func(o *JobsOptions) { o.WorkerConc = 1001 },
		"rounds":                    func(o *JobsOptions) { o.Rounds = -1 },
		"rounds not unary":          func(o *JobsOptions) { o.Rounds = 2 },
		"rate-of-capacity over 1":   func(o *JobsOptions) { o.Phase, o.RateOfCapacity = JobsPhaseE2E, 1.5 },
		"rate-of-capacity negative": func(o *JobsOptions) { o.Phase, o.RateOfCapacity = JobsPhaseE2E, -0.8 },
		"rate-of-capacity not e2e":  func(o *JobsOptions) { o.Phase, o.RateOfCapacity = JobsPhaseBoth, 0.8 },
		"rounds without baseline": func(o *JobsOptions) {
			o.Phase, o.Total, o.Rounds, o.Baseline = JobsPhaseUnary, 10, 2, false
		},
		"rounds with target": func(o *JobsOptions) {
			o.Phase, o.Total, o.Rounds, o.Baseline, o.Target = JobsPhaseUnary, 10, 2, true, "http://127.0.0.1:1"
		},
	} {
		o := testJobsOptions()
		bad(&o)
		if o.validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The unary goals judge each round's own comparison and, over rounds,
// their median; the report prints the rounds.
func TestUnaryRoundsJudgeTheMedian(t *testing.T) {
	run := func(server string, round int, rate, cpu float64, p99us int64) *UnaryRun {
		return &UnaryRun{Server: server, Round: round, Rate: rate, CPUPerCall: new(cpu), CPUSeconds: new(cpu),
			Call: LatencyReport{Count: 10, P99Us: p99us}}
	}
	p := &JobsPhase{Phase: JobsPhaseUnary, Unary: []*UnaryRun{
		run(unaryNullGRPC, 1, 50000, 16, 9000), run(unaryNullConnect, 1, 14000, 80, 40000),
		run(unarySurgeGRPC, 1, 35000, 24, 15000), run(unarySurgeAddr, 1, 27000, 36, 22000),
		run(unarySurgeGRPC, 2, 45000, 20, 12000), run(unaryNullGRPC, 2, 50000, 20, 9000),
		run(unaryNullGRPC, 3, 40000, 20, 9000), run(unarySurgeGRPC, 3, 36000, 24, 60000),
	}}
	p.judgeUnary()
	want := []struct {
		v   float64
		met bool
	}{{90, true}, {1.2, true}, {15, true}} // rates 70/90/90 %, CPU 1.5/1.0/1.2×, p99 15/12/60 ms
	if len(p.Goals) != 3 {
		t.Fatalf("goals %+v", p.Goals)
	}
	for i, w := range want {
		g := p.Goals[i]
		if g.Value == nil || math.Abs(*g.Value-w.v) > 1e-9 || g.Met == nil || *g.Met != w.met || g.Note != "median of 3 rounds" {
			t.Errorf("goal %s: %v %v %q, want %v %v", g.Name, g.Value, g.Met, g.Note, w.v, w.met)
		}
	}
	var out bytes.Buffer
	writeUnaryPhase(&out, JobsConfig{Total: 10, Concurrency: 2, Connections: 1}, p)
	for _, line := range []string{"surge --grpc-addr, round 3", "round 1: rate 70.0 %, server CPU per submit 1.50×, p99 15.00 ms",
		"round 3: rate 90.0 %, server CPU per submit 1.20×, p99 60.00 ms"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
	p.Unary = p.Unary[:4]
	p.judgeUnary()
	if g := p.Goals[0]; g.Note != "" || g.Value == nil || *g.Value != 70 || *g.Met {
		t.Errorf("one round: %+v", g)
	}
}

func TestJobsReportJudgesAndPrints(t *testing.T) {
	lat := func(p99 int64) LatencyReport {
		return LatencyReport{Count: 100, P50Us: p99 / 4, P95Us: p99 / 2, P99Us: p99, MaxUs: p99 * 2}
	}
	srv := &JobsRunReport{Server: "surge", Phase: JobsPhaseSubmit, Seconds: 10, Submitted: 70_000, SubmitRate: 7000,
		SubmitErrors: map[string]int64{"RESOURCE_EXHAUSTED": 12}, ResourceExhausted: 12, SubmitCall: lat(60_000)}
	srv.setCPU(JobsPhaseSubmit, 7) // 100 µs per submit
	null := &JobsRunReport{Server: "null", Phase: JobsPhaseSubmit, Seconds: 10, Submitted: 100_000, SubmitRate: 10_000, SubmitCall: lat(20_000)}
	null.setCPU(JobsPhaseSubmit, 4) // 40 µs per submit
	sub := &JobsPhase{Phase: JobsPhaseSubmit, Server: srv, Baseline: null}
	sub.judge()
	e2eSrv := &JobsRunReport{Server: "surge", Phase: JobsPhaseE2E, Seconds: 10, TargetRate: 10_000, Submitted: 100_000, Executed: 100_000,
		ExecutedRate: 10_500, SubmitToStart: lat(8_000), SubmitToDone: lat(9_000)}
	e2e := &JobsPhase{Phase: JobsPhaseE2E, Server: e2eSrv}
	e2e.judge()

	want := map[string]bool{
		"submit rate, % of do-nothing's":       true,  // 70 %
		"submit call p99 (ms)":                 false, // 60 ms
		"server CPU per submit ÷ do-nothing's": false, // 2.5×
		"jobs executed per second":             true,
		"submit→start p99 (ms)":                true,
	}
	for _, g := range append(sub.Goals, e2e.Goals...) {
		w, known := want[g.Name]
		if !known || g.Met == nil || *g.Met != w {
			t.Errorf("goal %q: met %v, want %v (known %v)", g.Name, g.Met, w, known)
		}
		delete(want, g.Name)
	}
	if len(want) > 0 {
		t.Errorf("goals not judged: %v", want)
	}
	if srv.errors() != 0 {
		t.Errorf("RESOURCE_EXHAUSTED counted as %d errors", srv.errors())
	}

	rep := &JobsReport{Config: JobsConfig{DurationSeconds: 10, Concurrency: 200, Connections: 1, SubmitWork: true, Rate: 10_000, Batch: 1,
		MaxInflight: 1000, Workers: 4, WorkerConcurrency: 64}, Peer: jobsPeer, Phases: []*JobsPhase{sub, e2e}}
	var out strings.Builder
	writeJobsPhase(&out, rep, sub)
	writeJobsPhase(&out, rep, e2e)
	for _, s := range []string{"~7,000 jobs/s (surge serve)", "~10,000 jobs/s (do-nothing server)", "100.0 µs", "40.0 µs", "70.0 %", "2.50×",
		"60.00 ms", "RESOURCE_EXHAUSTED: 12", "~1,044 jobs/s", "submit→start", "8.00 ms", "10,500/s"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	noTrackerNumbers(t, out.String())
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

// With --grpc the phases run over grpc-go: against the do-nothing grpc-go
// server's JobService and WorkerService, every submitted job reaches a
// worker stream and is reported.
func TestJobsE2EOverGRPCGo(t *testing.T) {
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeNullGRPC(ctx, addr) }()
	t.Cleanup(func() { cancel(); <-done })
	o := testJobsOptions()
	o.Phase, o.GRPC, o.Ack = JobsPhaseE2E, true, true
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	rep, err := newJobsRun(o, JobsPhaseE2E).measure(ctx, JobsPhaseE2E, grpcDialer(addr), func() (float64, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.errors(); n > 0 || rep.Submitted == 0 || rep.Executed != rep.Submitted || rep.SubmitToStart.Count != rep.Executed {
		t.Fatalf("%d errors (%v %v %v); submitted %d, executed %d, %d start latencies", n, rep.SubmitErrors, rep.WorkerErrorsByCode,
			rep.ErrorSamples, rep.Submitted, rep.Executed, rep.SubmitToStart.Count)
	}
}

// With --target the unary run loads the one address it names, the
// server's --addr, and says so: it was reported as "surge --grpc-addr"
// and judged against the do-nothing grpc-go server as if it were.
func TestUnaryAgainstATargetNamesItsAddr(t *testing.T) {
	base := startNullInProcess(t)
	var out, errOut bytes.Buffer
	o := testJobsOptions()
	o.Phase, o.Total, o.Concurrency, o.Connections, o.Baseline, o.Target = JobsPhaseUnary, 20, 2, 1, false, base
	o.Stdout, o.Stderr = &out, &errOut
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := RunJobs(ctx, o)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), unarySurgeAddr+" ") || strings.Contains(out.String(), unarySurgeGRPC) {
		t.Errorf("the report does not name the target's --addr alone:\n%s", out.String())
	}
}

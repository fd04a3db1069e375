package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/surge-run/surge/internal/jqpb"
)

// Phases of `surge bench jobs --phase`.
const (
	JobsPhaseSubmit = "submit"
	JobsPhaseE2E    = "e2e"
	JobsPhaseBoth   = "both"
)

// jobsPayload is the peer's ghz payload (docs/BENCHMARKS.md).
var jobsPayload = []byte(`{"command":["echo","bench"]}`)

// jobsQueue is the queue every server has from the start.
const jobsQueue = "default"

// JobsOptions are the flags of `surge bench jobs`.
type JobsOptions struct {
	Phase       string
	Duration    time.Duration
	Concurrency int // submit phase: callers, each a closed loop of SubmitJob
	Connections int // HTTP/2 connections the callers (or the generator) share
	SubmitWork  bool
	Rate        float64 // e2e phase: jobs/s offered (with RateOfCapacity, where the probe starts)
	// RateOfCapacity (e2e phase): when > 0, a probe first finds the
	// highest rate fresh servers sustain (jobs_capacity.go), and the phase
	// offers this fraction of it.
	RateOfCapacity float64
	Batch          int // e2e phase: jobs per SubmitJobs call; 1 for SubmitJob
	MaxInflight    int // e2e phase: submit calls in flight at once
	Workers        int
	WorkerConc     int
	Ack            bool
	Drain          time.Duration // e2e phase: how long to wait for submitted jobs to finish
	Baseline       bool
	Total          int // unary phase: SubmitJob calls in all (ghz --total)
	// Rounds (unary phase): after the first round, which runs all four
	// servers, each round runs the do-nothing grpc-go server and Surge's
	// --grpc-addr again, the order turned each round; the goals judge
	// the median of the rounds' own comparisons. 0 is 1.
	Rounds int
	// GRPC: the submit and e2e phases speak grpc-go to the servers'
	// --grpc-addr instead of connect-go over h2c to --addr.
	GRPC bool

	Options
}

func (o JobsOptions) phases() ([]string, error) {
	switch o.Phase {
	case JobsPhaseBoth:
		return []string{JobsPhaseSubmit, JobsPhaseE2E}, nil
	case JobsPhaseSubmit, JobsPhaseE2E, JobsPhaseUnary:
		return []string{o.Phase}, nil
	}
	return nil, fmt.Errorf("--phase %q: want submit, e2e, both or unary", o.Phase)
}

func (o JobsOptions) validate() error {
	if _, err := o.phases(); err != nil {
		return err
	}
	switch {
	case o.Duration <= 0:
		return errors.New("--duration must be positive")
	case o.Concurrency < 1 || o.Connections < 1 || o.MaxInflight < 1:
		return errors.New("--concurrency, --connections and --max-inflight must be at least 1")
	case o.Rate <= 0:
		return fmt.Errorf("--rate %v: want > 0 jobs/s", o.Rate)
	case o.Batch < 1 || o.Batch > 1000:
		return fmt.Errorf("--batch %d: want 1..1000 (SubmitJobs takes at most 1000)", o.Batch)
	case o.Workers < 1 || o.WorkerConc < 1 || o.WorkerConc > 1000:
		return errors.New("--workers must be at least 1 and --worker-concurrency 1..1000")
	case o.Drain < 0:
		return errors.New("--drain must not be negative")
	case o.Phase == JobsPhaseUnary && o.Total < 1:
		return fmt.Errorf("--total %d: the unary phase makes at least one call", o.Total)
	case o.RateOfCapacity < 0 || o.RateOfCapacity > 1:
		return fmt.Errorf("--rate-of-capacity %v: want a fraction in (0, 1], or 0 for --rate itself", o.RateOfCapacity)
	case o.RateOfCapacity > 0 && o.Phase != JobsPhaseE2E:
		return errors.New("--rate-of-capacity is for --phase e2e")
	case o.Rounds < 0:
		return fmt.Errorf("--rounds %d: want at least 1", o.Rounds)
	case o.Rounds > 1 && o.Phase != JobsPhaseUnary:
		return errors.New("--rounds is for --phase unary")
	case o.Rounds > 1 && (o.Target != "" || !o.Baseline):
		return errors.New("--rounds compares fresh servers with the do-nothing one round by round; it needs the baseline and no --target")
	}
	if o.GRPC && o.Target != "" {
		return errors.New("--grpc starts its own servers (on a --grpc-addr it picks); it cannot be used with --target")
	}
	if o.Target != "" && !strings.HasPrefix(o.Target, "http://") {
		return fmt.Errorf("--target %q: want http://host:port (h2c)", o.Target)
	}
	return nil
}

// grpcOpts make the bench's clients speak gRPC as ghz and grpc-go do by
// default: without asking for gzip, which connect clients otherwise do and
// which makes a connect server compress every reply (its flate set-up cost
// the server a sixth of its CPU in a profile), a cost ghz's users never see.
var grpcOpts = []connect.ClientOption{connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil)}

// newH2CClient is one cleartext HTTP/2 connection (more only if the
// server's stream limit is reached). No response-header timeout: a
// StreamJobs call may wait for its first job as long as the run lasts.
func newH2CClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression: true,
		Protocols:          &p,
	}}
}

// shardedHist is a latency histogram written by many goroutines: each
// writes its own shard (by index), so they rarely meet on one lock, and
// an HDR histogram per goroutine would cost ~170 KB each.
type shardedHist struct {
	shards [8]struct {
		mu sync.Mutex
		h  *hdrhistogram.Histogram
		_  [40]byte
	}
}

func newShardedHist() *shardedHist {
	s := &shardedHist{}
	for i := range s.shards {
		s.shards[i].h = newHist()
	}
	return s
}

func (s *shardedHist) record(i int, d time.Duration) {
	sh := &s.shards[uint(i)%uint(len(s.shards))]
	us := min(max(d.Microseconds(), 1), maxLatencyUs)
	sh.mu.Lock()
	_ = sh.h.RecordValue(us)
	sh.mu.Unlock()
}

func (s *shardedHist) latency() LatencyReport {
	all := newHist()
	for i := range s.shards {
		s.shards[i].mu.Lock()
		all.Merge(s.shards[i].h)
		s.shards[i].mu.Unlock()
	}
	return latencyOf(all)
}

// codeCounts counts failed calls by connect code (0..16; anything else is
// counted as unknown).
type codeCounts [17]atomic.Int64

func (c *codeCounts) add(err error) connect.Code {
	code := connect.CodeOf(err)
	if int(code) >= len(c) {
		code = connect.CodeUnknown
	}
	c[code].Add(1)
	return code
}

func (c *codeCounts) byName() map[string]int64 {
	m := map[string]int64{}
	for i := range c {
		if n := c[i].Load(); n > 0 {
			m[codeName(connect.Code(i))] = n
		}
	}
	return m
}

func codeName(c connect.Code) string {
	if c == 0 {
		return "OK"
	}
	return strings.ToUpper(c.String())
}

// jobsRun is one phase against one server: the callers or the generator,
// and the workers, with what they measured.
type jobsRun struct {
	o     JobsOptions
	label string
	base  time.Time // payload times are nanoseconds since base (monotonic)

	submitted, notSent, inflight atomic.Int64
	executed, started            atomic.Int64
	reportRetries                atomic.Int64
	submitErrs, workerErrs       codeCounts
	errCount                     atomic.Int64

	// serverBase is the server's base URL, to read its fsyncs from
	// /metrics; empty for a server that logs nothing.
	serverBase string

	submitLat, startLat, doneLat *shardedHist
	// tlSubmit and tlDone are the timeline (timeline.go) of the phase
	// that counts submits or executed jobs; the other one is nil.
	tlSubmit, tlDone *Timeline
	lag              *shardedHist

	mu      sync.Mutex
	samples []string
}

func newJobsRun(o JobsOptions, label string) *jobsRun {
	return &jobsRun{o: o, label: label, base: time.Now(),
		submitLat: newShardedHist(), startLat: newShardedHist(), doneLat: newShardedHist(), lag: newShardedHist()}
}

func (r *jobsRun) sample(what string, err error) {
	r.errCount.Add(1)
	r.mu.Lock()
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, what+": "+err.Error())
	}
	r.mu.Unlock()
}

// appendTimedPayload is the peer's payload with the submit time added:
// the worker reads it back to time submit→start without any shared map
// (and without the race of a job reaching a worker before its submit
// call has returned the id).
func appendTimedPayload(b []byte, ns int64) []byte {
	b = append(b, `{"command":["echo","bench"],"t":`...)
	b = strconv.AppendInt(b, ns, 10)
	return append(b, '}')
}

// payloadTime is the submit time appendTimedPayload put in p, or false.
func payloadTime(p []byte) (int64, bool) {
	i := bytes.LastIndex(p, []byte(`"t":`))
	if i < 0 {
		return 0, false
	}
	p = p[i+4:]
	j := 0
	for j < len(p) && p[j] >= '0' && p[j] <= '9' {
		j++
	}
	ns, err := strconv.ParseInt(string(p[:j]), 10, 64)
	return ns, err == nil
}

// workers runs the bench's workers until ctx ends: each registers, opens
// StreamJobs and reports success for every job as soon as it arrives (on
// up to its concurrency of goroutines), acknowledging it first with --ack.
// ready is closed once every worker has registered.
func (r *jobsRun) workers(ctx context.Context, dial jobsDialer, ready chan<- error) *sync.WaitGroup {
	var wg sync.WaitGroup
	regs := make(chan error, r.o.Workers)
	for w := range r.o.Workers {
		wg.Go(func() { r.worker(ctx, dial, w, regs) })
	}
	go func() {
		var first error
		for range r.o.Workers {
			if err := <-regs; err != nil && first == nil {
				first = err
			}
		}
		ready <- first
	}()
	return &wg
}

func (r *jobsRun) worker(ctx context.Context, dial jobsDialer, idx int, registered chan<- error) {
	c, err := dial(ctx)
	if err != nil {
		registered <- err
		return
	}
	defer c.close()
	id, err := c.register(ctx, &jqpb.RegisterWorkerRequest{
		Hostname: "surge-bench", Concurrency: int32(r.o.WorkerConc), Queues: []string{jobsQueue}})
	if err != nil {
		registered <- fmt.Errorf("RegisterWorker: %w", err)
		return
	}
	registered <- nil
	defer func() {
		// The server gives back at once whatever this worker still holds.
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.deregister(dctx, id)
	}()
	jobs := make(chan *jqpb.JobAssignment, r.o.WorkerConc)
	var hwg sync.WaitGroup
	for h := range r.o.WorkerConc {
		hwg.Go(func() { r.handle(ctx, c, id, idx*r.o.WorkerConc+h, jobs) })
	}
	defer hwg.Wait()
	defer close(jobs)
	for ctx.Err() == nil {
		err := c.stream(ctx, id, func(a *jqpb.JobAssignment) { jobs <- a })
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the stream ended")
		}
		r.workerErrs.add(err)
		r.sample("StreamJobs", err)
		// As the stock worker does after UNAVAILABLE: stream again.
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *jobsRun) handle(ctx context.Context, c jobsWorkerAPI, workerID string, idx int, jobs <-chan *jqpb.JobAssignment) {
	rep := &jqpb.ReportResultRequest{WorkerId: workerID, Success: true}
	ack := &jqpb.AckJobRequest{WorkerId: workerID}
	for a := range jobs {
		t, timed := payloadTime(a.Payload)
		if timed {
			r.startLat.record(idx, time.Since(r.base)-time.Duration(t))
		}
		r.started.Add(1)
		if r.o.Ack {
			ack.JobId = a.JobId
			if err := c.ack(ctx, ack); err != nil && ctx.Err() == nil {
				r.workerErrs.add(err)
				r.sample("AckJob", err)
			}
		}
		rep.JobId = a.JobId
		if err := r.report1(ctx, c, rep); err != nil {
			if ctx.Err() == nil {
				r.workerErrs.add(err)
				r.sample("ReportResult", err)
			}
			continue
		}
		if timed {
			d := time.Since(r.base) - time.Duration(t)
			r.doneLat.record(idx, d)
			r.tlDone.latency(d.Microseconds())
		}
		r.tlDone.done()
		r.executed.Add(1)
	}
}

// report1 reports a result, retrying after a short pause while the server
// says it is overloaded (RESOURCE_EXHAUSTED) or not ready (UNAVAILABLE), as
// the protocol asks of a worker: a dropped report would leave the job
// leased until its lease expired.
func (r *jobsRun) report1(ctx context.Context, c jobsWorkerAPI, rep *jqpb.ReportResultRequest) error {
	pause := 5 * time.Millisecond
	for try := 0; ; try++ {
		err := c.report(ctx, rep)
		code := connect.CodeOf(err)
		if err == nil || try == 20 || (code != connect.CodeResourceExhausted && code != connect.CodeUnavailable) {
			return err
		}
		r.reportRetries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// submitClients are the JobService clients the callers or the generator
// spread their calls over: one per --connections, each connection opened
// before the measured window.
func (o JobsOptions) submitClients(ctx context.Context, dial jobsDialer) ([]jobsSubmitter, func(), error) {
	var cs []jobsClient
	closeAll := func() {
		for _, c := range cs {
			c.close()
		}
	}
	for range o.Connections {
		c, err := dial(ctx)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	out := make([]jobsSubmitter, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out, closeAll, nil
}

// closedLoop is the peer's ghz run: Concurrency callers, each sending
// SubmitJob after SubmitJob until d has passed.
func (r *jobsRun) closedLoop(ctx context.Context, cs []jobsSubmitter, d time.Duration) time.Duration {
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i := range r.o.Concurrency {
		c := cs[i%len(cs)]
		wg.Go(func() {
			msg := &jqpb.SubmitJobRequest{QueueName: jobsQueue, Payload: jobsPayload}
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				r.inflight.Add(1)
				err := c.submit(ctx, msg)
				r.inflight.Add(-1)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if r.submitErrs.add(err) != connect.CodeResourceExhausted {
						r.sample("SubmitJob", err)
					}
					continue
				}
				r.submitLat.record(i, time.Since(t0))
				r.tlSubmit.record(time.Since(t0).Microseconds())
				r.submitted.Add(1)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// openLoop offers Rate jobs/s for d on a fixed clock, in calls of Batch
// jobs, whether or not earlier calls were answered. MaxInflight senders
// take the due calls; a call due while all of them are busy is not sent.
// Each sender reuses its request and payload buffer, so the generator
// allocates little beyond what connect does per call.
func (r *jobsRun) openLoop(ctx context.Context, cs []jobsSubmitter, d time.Duration) time.Duration {
	due := make(chan time.Duration, r.o.MaxInflight)
	var wg sync.WaitGroup
	for s := range r.o.MaxInflight {
		c := cs[s%len(cs)]
		wg.Go(func() { r.sender(ctx, c, s, due) })
	}
	rate := r.o.Rate / float64(r.o.Batch) // calls/s
	elapsed := schedule(ctx, rate, d, func(_ int64, at time.Time) {
		select {
		case due <- at.Sub(r.base):
		default:
			r.notSent.Add(int64(r.o.Batch))
		}
	})
	close(due)
	wg.Wait()
	return elapsed
}

func (r *jobsRun) sender(ctx context.Context, c jobsSubmitter, idx int, due <-chan time.Duration) {
	reqs := make([]*jqpb.SubmitJobRequest, r.o.Batch)
	bufs := make([][]byte, r.o.Batch)
	for k := range reqs {
		reqs[k] = &jqpb.SubmitJobRequest{QueueName: jobsQueue}
		bufs[k] = make([]byte, 0, 64)
	}
	batch := &jqpb.SubmitJobsRequest{Jobs: reqs}
	for at := range due {
		t0 := time.Since(r.base)
		r.lag.record(idx, t0-at)
		for k := range reqs {
			bufs[k] = appendTimedPayload(bufs[k][:0], int64(t0))
			reqs[k].Payload = bufs[k]
		}
		r.inflight.Add(1)
		var err error
		if r.o.Batch == 1 {
			err = c.submit(ctx, reqs[0])
		} else {
			err = c.submitBatch(ctx, batch)
		}
		r.inflight.Add(-1)
		if err != nil {
			if ctx.Err() == nil && r.submitErrs.add(err) != connect.CodeResourceExhausted {
				r.sample("submit", err)
			}
			continue
		}
		r.submitLat.record(idx, time.Since(r.base)-t0)
		r.submitted.Add(int64(r.o.Batch))
	}
}

// progress prints a line a second (redrawn in place on a terminal) until
// stopped.
func (r *jobsRun) progress(d time.Duration) (stop func()) {
	start := time.Now()
	var lastSub, lastExe int64
	lastAt := start
	return progress(r.o.Stderr, r.o.ProgressTTY, time.Second, func() string {
		now := time.Now()
		sub, exe := r.submitted.Load(), r.executed.Load()
		secs := now.Sub(lastAt).Seconds()
		line := fmt.Sprintf("%s  %.0f/%.0f s  submitted %s (%s/s)  executed %s (%s/s)  in flight %d  not sent %s  errors %d",
			r.label, min(now.Sub(start), d).Seconds(), d.Seconds(), grouped(sub), grouped(int64(float64(sub-lastSub)/secs)),
			grouped(exe), grouped(int64(float64(exe-lastExe)/secs)), r.inflight.Load(), grouped(r.notSent.Load()), r.errCount.Load()+r.resourceExhausted())
		lastSub, lastExe, lastAt = sub, exe, now
		return line
	})
}

func (r *jobsRun) resourceExhausted() int64 {
	return r.submitErrs[connect.CodeResourceExhausted].Load()
}

// measure runs one phase against baseURL: the workers, then the callers
// (submit) or the generator (e2e), then for e2e the wait for the submitted
// jobs to finish; cpu reads the server's CPU seconds.
func (r *jobsRun) measure(ctx context.Context, phase string, dial jobsDialer, cpu func() (float64, error)) (*JobsRunReport, error) {
	// Set before the workers start: they read it.
	tl := newTimeline(r.o.SampleInterval, cpu)
	if phase == JobsPhaseSubmit {
		r.tlSubmit = tl
	} else {
		r.tlDone = tl
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg *sync.WaitGroup
	if phase == JobsPhaseE2E || r.o.SubmitWork {
		ready := make(chan error, 1)
		wg = r.workers(wctx, dial, ready)
		if err := <-ready; err != nil {
			stopWorkers()
			wg.Wait()
			return nil, err
		}
	}
	cs, closeClients, err := r.o.submitClients(ctx, dial)
	if err != nil {
		if wg != nil {
			stopWorkers()
			wg.Wait()
		}
		return nil, err
	}
	defer closeClients()

	m := meterCPU(cpu)
	host := startHostMeters(ctx, r.serverBase)
	tl.host = host.stalls.take
	stop := r.progress(r.o.Duration)
	tl.begin()
	var elapsed time.Duration
	if phase == JobsPhaseSubmit {
		elapsed = r.closedLoop(ctx, cs, r.o.Duration)
	} else {
		elapsed = r.openLoop(ctx, cs, r.o.Duration)
	}
	var drained time.Duration
	if phase == JobsPhaseE2E {
		t0 := time.Now()
		for ctx.Err() == nil && r.executed.Load() < r.submitted.Load() && time.Since(t0) < r.o.Drain {
			time.Sleep(5 * time.Millisecond)
		}
		drained = time.Since(t0)
	}
	points := tl.end()
	stop()
	rep := r.report(phase, elapsed, drained)
	host.end(ctx, rep)
	rep.Timeline = points
	rep.GeneratorCPU = m.generator()
	if c, ok := m.usedOrWarn(r.o.Stderr, r.label); ok {
		rep.setCPU(phase, c)
	}
	if wg != nil {
		stopWorkers()
		wg.Wait()
	}
	rep.WorkerErrorsByCode = r.workerErrs.byName()
	rep.ReportRetries = r.reportRetries.Load()
	return rep, ctx.Err()
}

// JobsRunReport is one phase against one server.
type JobsRunReport struct {
	Server  string  `json:"server"`
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	// Submitted counts jobs whose submit call succeeded; the rate is per
	// second of the submit window.
	Submitted  int64   `json:"submitted"`
	SubmitRate float64 `json:"submittedPerSecond"`
	// e2e only: the offered rate, and jobs due while every sender was busy.
	TargetRate float64 `json:"targetPerSecond,omitempty"`
	NotSent    int64   `json:"notSent"`

	// SubmitErrors counts failed submit calls by code, RESOURCE_EXHAUSTED
	// (a full queue or an overloaded server: retry later) among them but
	// also apart, since a run at the queue's limit is expected to meet it.
	SubmitErrors       map[string]int64 `json:"submitErrorsByCode"`
	ResourceExhausted  int64            `json:"resourceExhausted"`
	WorkerErrorsByCode map[string]int64 `json:"workerErrorsByCode"`
	// ReportRetries counts ReportResult calls retried after
	// RESOURCE_EXHAUSTED or UNAVAILABLE.
	ReportRetries int64    `json:"reportRetries"`
	ErrorSamples  []string `json:"errorSamples,omitempty"`

	// Executed counts jobs the workers reported successfully, during the
	// window and (e2e) the drain after it; Unfinished is what e2e
	// submitted and did not see reported by the end of the drain.
	Executed      int64         `json:"executed"`
	ExecutedRate  float64       `json:"executedPerSecond"`
	DrainSeconds  float64       `json:"drainSeconds,omitempty"`
	Unfinished    int64         `json:"unfinished"`
	SubmitCall    LatencyReport `json:"submitCall"`
	SubmitToStart LatencyReport `json:"submitToStart"`
	SubmitToDone  LatencyReport `json:"submitToDone"`
	SendLagP99Us  int64         `json:"sendLagP99Us,omitempty"`

	ServerCPU    *float64 `json:"serverCpuSeconds,omitempty"`
	CPUPerJobUs  *float64 `json:"serverCpuPerJobUs,omitempty"` // per submit (submit phase) or executed job (e2e)
	JobsPerCPUs  *float64 `json:"jobsPerServerCpuSecond,omitempty"`
	GeneratorCPU float64  `json:"generatorCpuSeconds"`
	PeakRSSBytes *int64   `json:"serverPeakRssBytes,omitempty"`
	// HostStalls and ServerFsyncs say whether the host stalled the run
	// (stalls.go): the bench's own late wake-ups, the server's slow fsyncs.
	HostStalls   *StallReport `json:"hostStalls,omitempty"`
	ServerFsyncs *FsyncReport `json:"serverFsyncs,omitempty"`
	// Timeline is the phase per interval (timeline.go): submits (submit
	// phase; their call's latency) or executed jobs (e2e; submit to done).
	Timeline []TimelinePoint `json:"timeline,omitempty"`
}

func (r *jobsRun) report(phase string, elapsed, drained time.Duration) *JobsRunReport {
	rep := &JobsRunReport{Phase: phase, Seconds: elapsed.Seconds(), Submitted: r.submitted.Load(), NotSent: r.notSent.Load(),
		SubmitErrors: r.submitErrs.byName(), ResourceExhausted: r.resourceExhausted(),
		Executed: r.executed.Load(), DrainSeconds: drained.Seconds(),
		SubmitCall: r.submitLat.latency(), SubmitToStart: r.startLat.latency(), SubmitToDone: r.doneLat.latency()}
	r.mu.Lock()
	rep.ErrorSamples = append([]string(nil), r.samples...)
	r.mu.Unlock()
	if rep.Seconds > 0 {
		rep.SubmitRate = float64(rep.Submitted) / rep.Seconds
	}
	if w := rep.Seconds + rep.DrainSeconds; w > 0 {
		rep.ExecutedRate = float64(rep.Executed) / w
	}
	if phase == JobsPhaseE2E {
		rep.TargetRate = r.o.Rate
		rep.Unfinished = max(rep.Submitted-rep.Executed, 0)
		rep.SendLagP99Us = r.lag.latency().P99Us
	}
	return rep
}

func (r *JobsRunReport) setCPU(phase string, cpu float64) {
	r.ServerCPU = &cpu
	n := r.Submitted
	if phase == JobsPhaseE2E {
		n = r.Executed
	}
	if n > 0 {
		us := cpu * 1e6 / float64(n)
		r.CPUPerJobUs = &us
	}
	if cpu > 0 {
		v := float64(n) / cpu
		r.JobsPerCPUs = &v
	}
}

// JobsReport is everything `surge bench jobs` measured; --json writes it.
type JobsReport struct {
	Benchmark string       `json:"benchmark"`
	Config    JobsConfig   `json:"config"`
	Phases    []*JobsPhase `json:"phases"`
	Peer      JobsPeer     `json:"peer"`
	Verdict
}

// JobsConfig records the flags a run used.
type JobsConfig struct {
	DurationSeconds   float64 `json:"durationSeconds"`
	Concurrency       int     `json:"concurrency"`
	Connections       int     `json:"connections"`
	SubmitWork        bool    `json:"workersDuringSubmit"`
	Rate              float64 `json:"ratePerSecond"`
	RateOfCapacity    float64 `json:"rateOfCapacity,omitempty"`
	Batch             int     `json:"batch"`
	MaxInflight       int     `json:"maxInflight"`
	Workers           int     `json:"workers"`
	WorkerConcurrency int     `json:"workerConcurrency"`
	Ack               bool    `json:"ack"`
	Baseline          bool    `json:"baseline"`
	Target            string  `json:"target,omitempty"`
	Partitions        int     `json:"partitions,omitempty"`
	GRPC              bool    `json:"grpcGo,omitempty"`
	Total             int     `json:"total,omitempty"`
	Rounds            int     `json:"rounds,omitempty"`
}

// JobsPeer is the peer's published ghz figures (docs/BENCHMARKS.md).
type JobsPeer struct {
	SubmitRate  float64 `json:"submitPerSecond"`
	SubmitP50Ms float64 `json:"submitP50Ms"`
	SubmitP99Ms float64 `json:"submitP99Ms"`
	VCPU        int     `json:"vcpu"`
}

var jobsPeer = JobsPeer{SubmitRate: 1044, SubmitP50Ms: 148, SubmitP99Ms: 661, VCPU: 4}

// JobsPhase is one phase against the server and, if run, the do-nothing
// baseline, with the goals.
type JobsPhase struct {
	Phase string `json:"phase"`
	// Capacity is the --rate-of-capacity probe's finding (e2e).
	Capacity *CapacityReport `json:"capacity,omitempty"`
	Server   *JobsRunReport  `json:"server"`
	Baseline *JobsRunReport  `json:"baseline,omitempty"`
	// Unary are the unary phase's runs, one per server.
	Unary []*UnaryRun `json:"unary,omitempty"`
	Goals []Goal      `json:"goals"`
}

// The jobs goals, judged in one run against the do-nothing server.
const (
	jobsGoalRatePercent = 60
	jobsGoalP99Ms       = 50
	jobsGoalCPUMultiple = 2
	jobsGoalE2ERate     = 10_000
)

func (p *JobsPhase) judge() {
	s, b := p.Server, p.Baseline
	p.Goals = nil
	if s == nil {
		return
	}
	p99 := func(l LatencyReport) *float64 {
		if l.Count == 0 {
			return nil
		}
		v := float64(l.P99Us) / 1e3
		return &v
	}
	lt := func(v float64) bool { return v < jobsGoalP99Ms }
	if p.Phase == JobsPhaseSubmit {
		var pct, cpux *float64
		if b != nil && b.SubmitRate > 0 {
			v := 100 * s.SubmitRate / b.SubmitRate
			pct = &v
		}
		if b != nil && s.CPUPerJobUs != nil && b.CPUPerJobUs != nil && *b.CPUPerJobUs > 0 {
			v := *s.CPUPerJobUs / *b.CPUPerJobUs
			cpux = &v
		}
		p.Goals = append(p.Goals,
			goal("submit rate, % of do-nothing's", "≥ 60 %", "%", pct, func(v float64) bool { return v >= jobsGoalRatePercent },
				fmt.Sprintf("peer %s jobs/s on %d vCPU", grouped(int64(jobsPeer.SubmitRate)), jobsPeer.VCPU)),
			goal("submit call p99 (ms)", "< 50 ms", "ms", p99(s.SubmitCall), lt, fmt.Sprintf("peer %.0f ms", jobsPeer.SubmitP99Ms)),
			goal("server CPU per submit ÷ do-nothing's", "≤ 2×", "×", cpux, func(v float64) bool { return v <= jobsGoalCPUMultiple }, ""))
		return
	}
	rate := s.ExecutedRate
	p.Goals = append(p.Goals,
		goal("jobs executed per second", "≥ 10,000", "", &rate, func(v float64) bool { return v >= jobsGoalE2ERate },
			fmt.Sprintf("offered %s/s", grouped(int64(s.TargetRate)))),
		goal("submit→start p99 (ms)", "< 50 ms", "ms", p99(s.SubmitToStart), lt, "peer timed only the submit call"))
}

var errJobsFailed = errors.New("jobs bench failed")

// RunJobs runs each phase against the do-nothing server and then surge
// (each a fresh process, so one phase's leftover jobs cannot reach the
// next), prints the report and writes the JSON.
func RunJobs(ctx context.Context, o JobsOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	phases, _ := o.phases()
	rep := &JobsReport{Benchmark: "jobs", Peer: jobsPeer, Config: JobsConfig{
		DurationSeconds: o.Duration.Seconds(), Concurrency: o.Concurrency, Connections: o.Connections, SubmitWork: o.SubmitWork,
		Rate: o.Rate, RateOfCapacity: o.RateOfCapacity, Batch: o.Batch, MaxInflight: o.MaxInflight, Workers: o.Workers, WorkerConcurrency: o.WorkerConc,
		Ack: o.Ack, Baseline: o.Baseline, Target: o.Target, Partitions: o.Partitions, GRPC: o.GRPC}}
	if o.Phase == JobsPhaseUnary {
		rep.Config.Total, rep.Config.Rounds = o.Total, o.Rounds
	}
	return runScenario(ctx, o.Options, "surge-bench-jobs-", &jobsBench{o: o, phases: phases, rep: rep})
}

// jobsBench is the jobs scenario: each phase against the do-nothing
// server, then against surge.
type jobsBench struct {
	o      JobsOptions
	phases []string
	rep    *JobsReport
}

func (b *jobsBench) setup(context.Context, *Rig) error { return nil }
func (b *jobsBench) judge(io.Writer)                   {}
func (b *jobsBench) report() any                       { return b.rep }
func (b *jobsBench) verdict() *Verdict                 { return &b.rep.Verdict }
func (b *jobsBench) passed() string                    { return "OK: no errors, every submitted job executed" }
func (b *jobsBench) failed() error                     { return errJobsFailed }

func (b *jobsBench) load(ctx context.Context, rig *Rig) error {
	o, rep := b.o, b.rep
	for _, ph := range b.phases {
		p := &JobsPhase{Phase: ph}
		rep.Phases = append(rep.Phases, p)
		if ph == JobsPhaseUnary {
			err := runUnaryPhase(ctx, o, rig, p)
			p.judgeUnary()
			writeUnaryPhase(o.Stdout, rep.Config, p)
			if err != nil {
				rep.add(ph + ": " + err.Error())
			}
			for _, r := range p.Unary {
				if r.Errors > 0 {
					rep.add(fmt.Sprintf("%s: %s: %s errors", ph, r.Server, grouped(r.Errors)))
				}
			}
			continue
		}
		err := runJobsPhase(ctx, o, rig, p)
		p.judge()
		if p.Server != nil || p.Baseline != nil {
			writeJobsPhase(o.Stdout, rep, p)
		}
		if err != nil {
			rep.add(ph + ": " + err.Error())
			if ctx.Err() != nil {
				break
			}
		}
		if s := p.Server; s != nil {
			if n := s.errors(); n > 0 {
				rep.add(fmt.Sprintf("%s: %s errors (not counting RESOURCE_EXHAUSTED)", ph, grouped(n)))
			}
			if s.Unfinished > 0 {
				rep.add(fmt.Sprintf("%s: %s submitted jobs not executed within the %.0f s drain", ph, grouped(s.Unfinished), o.Drain.Seconds()))
			}
		}
	}
	return nil
}

// errors counts failed calls other than RESOURCE_EXHAUSTED.
func (r *JobsRunReport) errors() int64 {
	var n int64
	for _, m := range []map[string]int64{r.SubmitErrors, r.WorkerErrorsByCode} {
		for k, v := range m {
			if k != codeName(connect.CodeResourceExhausted) {
				n += v
			}
		}
	}
	return n
}

func runJobsPhase(ctx context.Context, o JobsOptions, rig *Rig, p *JobsPhase) error {
	label := p.Phase
	var grpcArgs []string
	var grpcAddr string
	if o.GRPC {
		var err error
		if grpcAddr, err = freeAddr(); err != nil {
			return err
		}
		grpcArgs = []string{"--grpc-addr", grpcAddr}
	}
	dialFor := func(srv *target) jobsDialer {
		if o.GRPC {
			return grpcDialer(grpcAddr)
		}
		return connectDialer(srv.base)
	}
	if o.RateOfCapacity > 0 {
		c, err := probeCapacity(ctx, o, rig, label, dialFor, grpcArgs)
		if err != nil {
			return err
		}
		p.Capacity, o.Rate = c, c.Rate
	}
	if o.Baseline {
		null, err := rig.startNull(ctx, label, "null-jobs-"+p.Phase, grpcArgs...)
		if err != nil {
			return err
		}
		dial := connectDialer(null.baseURL())
		if o.GRPC {
			dial = grpcDialer(grpcAddr)
		}
		r := newJobsRun(o, label+" (do-nothing server)")
		rep, err := r.measure(ctx, p.Phase, dial, null.cpuSeconds)
		if rep != nil {
			rep.Server = "null"
			rep.PeakRSSBytes = peakOf(null)
			p.Baseline = rep
			if n := rep.errors(); n > 0 {
				rig.logf("warning: %s: the do-nothing server had %d errors; it is not a clean ceiling", label, n)
			}
		}
		rig.stopNull(null)
		if err != nil {
			return fmt.Errorf("do-nothing server: %w", err)
		}
	}
	srv, err := rig.target(ctx, label, "surge-jobs-"+p.Phase, "data-"+p.Phase, "jobs-"+p.Phase, grpcArgs...)
	if err != nil {
		return err
	}
	dial := dialFor(srv)
	r := newJobsRun(o, label)
	r.serverBase = srv.base
	rep, err := r.measure(ctx, p.Phase, dial, srv.cpu(ctx))
	if rep != nil {
		rep.Server = srv.name(o.Options)
		rep.PeakRSSBytes = srv.peakRSS()
		p.Server = rep
	}
	if err != nil {
		return err
	}
	return srv.stop()
}

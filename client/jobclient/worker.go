package jobclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
)

// WorkerConfig configures a Worker; the zero value of each field takes its
// default.
type WorkerConfig struct {
	// ID names the worker to the server (`surge ctl worker list`); empty:
	// the server assigns one. Two live workers must not share an id: the
	// newer one's stream replaces the older one's, which then stops.
	ID       string
	Hostname string // default os.Hostname()
	// Queues the worker takes jobs from; default: the queues given to
	// Handle, or "default" if only the catch-all handler ("") was given.
	Queues      []string
	Concurrency int           // handlers running at once; default runtime.NumCPU()
	Heartbeat   time.Duration // default 5 s; the server's lease (30 s) must be longer
	Logger      *slog.Logger  // default: discard
}

// Job is one job given to a handler.
type Job[T any] struct {
	ID       string
	Queue    string
	Priority int
	// TTL is the job's time to live, 0 if none; the handler's context
	// ends when it is up.
	TTL     time.Duration
	Payload []byte // as submitted
	Args    T      // the payload decoded from JSON (for Job[[]byte]: the payload itself)
	// Traceparent and Tracestate are the job's W3C trace context when its
	// submission was traced and the server traces (empty otherwise): the
	// server's dispatch span, so that what the handler does joins the
	// job's trace. The worker sends Traceparent (and Tracestate) with the
	// job's report; a handler that makes a span of its own may set them
	// to that span's, so that the report is its child.
	Traceparent string
	Tracestate  string
}

type handlerFunc func(ctx context.Context, a *jqpb.JobAssignment) ([]byte, error)

// Why a job's context ended; the cause decides what is reported.
var (
	errCancelled = errors.New("cancelled") // the protocol's error_message for a cancelled job
	errStopNow   = errors.New("jobclient: worker stopped now")
)

type ttlError struct{ ttl time.Duration }

func (e ttlError) Error() string { return fmt.Sprintf("timed out: the job's TTL of %v is up", e.ttl) }

// Worker runs handler functions for the jobs a server pushes to it. Build
// it with NewWorker, add handlers with Handle, then call Run once.
type Worker struct {
	c        *Client
	cfg      WorkerConfig
	log      *slog.Logger
	handlers map[string]handlerFunc
	started  atomic.Bool

	// hard is the parent of every job's context: StopNow cancels it.
	hard     context.Context
	stopNow  context.CancelCauseFunc
	sem      chan struct{}
	draining atomic.Bool
	wg       sync.WaitGroup

	mu      sync.Mutex
	id      string
	running map[string]context.CancelCauseFunc
}

// NewWorker returns a worker of c's server.
func NewWorker(c *Client, cfg WorkerConfig) *Worker {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = runtime.NumCPU()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hard, stop := context.WithCancelCause(context.Background())
	return &Worker{
		c: c, cfg: cfg, log: log, handlers: map[string]handlerFunc{},
		hard: hard, stopNow: stop, sem: make(chan struct{}, cfg.Concurrency),
		id: cfg.ID, running: map[string]context.CancelCauseFunc{},
	}
}

// Handle makes fn run the jobs of queue; queue "" handles every queue
// without a handler of its own. T is the job's payload decoded from JSON;
// a payload that does not decode fails the job, naming the error. With
// T = []byte the handler gets the payload as is. fn's result is stored as
// the job's result; an error fails the job (retried while it has retries
// left) with the error's text as its message.
//
// fn's context ends when the job is cancelled, its TTL is up, or StopNow
// is called; a handler must return soon after. Call Handle before Run.
func Handle[T any](w *Worker, queue string, fn func(ctx context.Context, job *Job[T]) ([]byte, error)) {
	if w.started.Load() {
		panic("jobclient: Handle called after Run")
	}
	if _, dup := w.handlers[queue]; dup {
		panic("jobclient: two handlers for queue " + queue)
	}
	w.handlers[queue] = func(ctx context.Context, a *jqpb.JobAssignment) ([]byte, error) {
		job := &Job[T]{ID: a.JobId, Queue: a.QueueName, Priority: int(a.Priority),
			TTL: time.Duration(a.TtlSeconds) * time.Second, Payload: a.Payload,
			Traceparent: a.Traceparent, Tracestate: a.Tracestate}
		// The report goes in the trace the handler left.
		defer func() { a.Traceparent, a.Tracestate = job.Traceparent, job.Tracestate }()
		if raw, ok := any(&job.Args).(*[]byte); ok {
			*raw = a.Payload
		} else if err := json.Unmarshal(a.Payload, &job.Args); err != nil {
			return nil, fmt.Errorf("payload does not decode into %T: %w", job.Args, err)
		}
		return fn(ctx, job)
	}
}

// ID is the worker's id: the configured one, or the server's choice once
// Run has registered.
func (w *Worker) ID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

// StopNow makes Run stop at once: it takes no more jobs, cancels the
// contexts of running handlers, reports nothing for jobs that did not
// succeed (Deregister gives them back to the queue for another worker),
// and returns once the handlers have returned. For a second Ctrl-C.
func (w *Worker) StopNow() { w.stopNow(errStopNow) }

func (w *Worker) queues() []string {
	if len(w.cfg.Queues) > 0 {
		return w.cfg.Queues
	}
	var qs []string
	for q := range w.handlers {
		if q != "" {
			qs = append(qs, q)
		}
	}
	slices.Sort(qs)
	return qs // empty: the server's "default"
}

// Run registers the worker, takes jobs from its stream and runs them until
// ctx is cancelled or the server tells the worker to stop.
//
// Cancelling ctx drains: no new jobs; running ones finish and are
// reported; the worker deregisters; Run returns nil. The server's
// DrainWorker does the same, its ShutdownWorker what StopNow does. When the
// connection fails or the server restarts, running jobs go on and the
// worker registers and streams again, waiting 0.1 s doubling to 5 s between
// attempts. Run returns an error only for what retrying cannot mend (an
// unknown queue, a server without the jobs API).
func (w *Worker) Run(ctx context.Context) error {
	if w.started.Swap(true) {
		return errors.New("jobclient: Run called twice")
	}
	if len(w.handlers) == 0 {
		return errors.New("jobclient: no handlers: call Handle before Run")
	}
	defer w.stopNow(nil)
	var bo backoff
	for {
		err := w.register(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || w.hard.Err() != nil {
			return nil // never registered: nothing to drain
		}
		if !retryable(err) {
			return fmt.Errorf("jobclient: registering: %w", err)
		}
		w.log.Warn("jobs worker: cannot register, retrying", "err", err)
		if !bo.sleep(ctx, w.hard) {
			return nil
		}
	}
	w.log.Info("jobs worker: registered", "worker_id", w.ID(), "queues", w.queues(), "concurrency", w.cfg.Concurrency)

	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); w.heartbeat(hbCtx) }()

	err := w.serve(ctx)
	w.draining.Store(true)
	w.wg.Wait()
	stopHB()
	<-hbDone

	if errors.Is(err, errReplaced) {
		w.log.Warn("jobs worker: stopped: another worker streams with this id", "worker_id", w.ID())
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, derr := w.c.workers.Deregister(dctx, connect.NewRequest(&jqpb.DeregisterRequest{WorkerId: w.ID()})); derr != nil {
		w.log.Warn("jobs worker: deregister failed; the server gives its jobs back when their leases expire", "err", derr)
	}
	w.log.Info("jobs worker: stopped", "worker_id", w.ID())
	return err
}

func (w *Worker) register(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.hard, cancel)()
	resp, err := w.c.workers.RegisterWorker(rctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{
		WorkerId: w.ID(), Hostname: w.cfg.Hostname, Concurrency: int32(clampInt32(w.cfg.Concurrency)), Queues: w.queues(),
	}))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.id = resp.Msg.WorkerId
	w.mu.Unlock()
	return nil
}

// errReplaced: the server ended the stream because another one of the
// same worker id opened.
var errReplaced = errors.New("jobclient: replaced by another worker with the same id")

// serve streams until it is time to stop: it returns once ctx is done, the
// server drained or shut the worker down (having cancelled the running jobs
// then), or on an error retrying cannot mend.
func (w *Worker) serve(ctx context.Context) error {
	var bo backoff
	notFound := 0
	for {
		got, err := w.stream(ctx)
		if got {
			bo.reset()
			notFound = 0
		}
		switch {
		case ctx.Err() != nil || w.hard.Err() != nil:
			return nil
		case err == nil:
			w.log.Info("jobs worker: drained by the server: finishing running jobs", "worker_id", w.ID())
			return nil
		case connect.CodeOf(err) == connect.CodeAlreadyExists:
			// Another process streams as this worker id now: finish the
			// running jobs (the leases are the id's), take no more, and
			// do not deregister, which would give back the other's jobs.
			return fmt.Errorf("%w: %w", errReplaced, err)
		case connect.CodeOf(err) == connect.CodeAborted:
			w.log.Warn("jobs worker: shut down by the server: stopping running jobs", "worker_id", w.ID(), "err", err)
			w.stopNow(errStopNow)
			return nil
		case connect.CodeOf(err) == connect.CodeNotFound:
			// Either the server forgot the worker (register again) or a
			// queue does not exist (registering again will not help).
			if notFound++; notFound > 1 {
				return fmt.Errorf("jobclient: streaming jobs: %w", err)
			}
		case !retryable(err):
			return fmt.Errorf("jobclient: streaming jobs: %w", err)
		}
		w.log.Warn("jobs worker: stream ended, reconnecting", "err", err)
		for {
			if !bo.sleep(ctx, w.hard) {
				return nil
			}
			rerr := w.register(ctx)
			if rerr == nil {
				break
			}
			if ctx.Err() != nil || w.hard.Err() != nil {
				return nil
			}
			if !retryable(rerr) {
				return fmt.Errorf("jobclient: registering again: %w", rerr)
			}
		}
	}
}

// stream runs one StreamJobs call; got says whether it delivered anything.
func (w *Worker) stream(ctx context.Context) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.hard, cancel)()
	// Saying what this process holds lets the server keep those and give
	// back at once whatever an earlier process of this id held.
	st, err := w.c.workers.StreamJobs(sctx, connect.NewRequest(&jqpb.StreamJobsRequest{
		WorkerId: w.ID(), Queues: w.queues(), AcceptsCancel: true, Held: w.held(),
	}))
	if err != nil {
		return false, err
	}
	defer st.Close()
	for st.Receive() {
		got = true
		w.dispatch(st.Msg())
	}
	return got, st.Err()
}

func (w *Worker) dispatch(a *jqpb.JobAssignment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cancel, known := w.running[a.JobId]
	if a.Cancel {
		if known {
			w.log.Info("jobs worker: job cancelled", "job_id", a.JobId)
			cancel(errCancelled)
		}
		return
	}
	if known {
		return // pushed again after a reconnect: it is running already
	}
	jctx, cancel := context.WithCancelCause(w.hard)
	w.running[a.JobId] = cancel
	w.wg.Add(1)
	go w.work(jctx, a)
}

// maxHeld is the server's limit on the jobs a worker names at once
// (jobs.MaxHeldJobs); the server never pushes more than a worker's
// concurrency, itself at most this.
const maxHeld = 1000

// held lists the jobs this process holds: pushed to it, not yet
// reported (running or waiting for a slot).
func (w *Worker) held() *jqpb.HeldJobs {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// Past the limit (never in practice) the rest's leases run out.
	return &jqpb.HeldJobs{JobIds: ids[:min(len(ids), maxHeld)]}
}

func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := w.held()
		// The heartbeat extends the leases of exactly these jobs.
		req := &jqpb.HeartbeatRequest{WorkerId: w.ID(), ActiveJobCount: int32(len(held.JobIds)), Held: held}
		if _, err := w.c.workers.Heartbeat(ctx, connect.NewRequest(req)); err != nil && ctx.Err() == nil {
			w.log.Debug("jobs worker: heartbeat failed", "err", err)
		}
	}
}

func (w *Worker) work(ctx context.Context, a *jqpb.JobAssignment) {
	defer w.wg.Done()
	defer func() {
		w.mu.Lock()
		w.running[a.JobId](nil)
		delete(w.running, a.JobId)
		w.mu.Unlock()
	}()
	select {
	case w.sem <- struct{}{}:
		defer func() { <-w.sem }()
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errCancelled) {
			w.report(a, false, nil, errCancelled.Error())
		}
		return
	}
	if w.draining.Load() || ctx.Err() != nil {
		return // never started: deregistering gives it back
	}
	h := w.handlers[a.QueueName]
	if h == nil {
		h = w.handlers[""]
	}
	if h == nil {
		w.report(a, false, nil, fmt.Sprintf("this worker has no handler for queue %q", a.QueueName))
		return
	}
	if _, err := w.c.workers.AckJob(ctx, traced(connect.NewRequest(&jqpb.AckJobRequest{WorkerId: w.ID(), JobId: a.JobId}), a)); err != nil {
		if c := connect.CodeOf(err); c == connect.CodeFailedPrecondition || c == connect.CodeNotFound {
			w.log.Info("jobs worker: job no longer ours, not run", "job_id", a.JobId, "err", err)
			return
		}
		// The ack only makes RUNNING visible; the job is still leased
		// to this worker, so run it.
		w.log.Debug("jobs worker: ack failed", "job_id", a.JobId, "err", err)
	}
	if a.TtlSeconds > 0 {
		ttl := time.Duration(a.TtlSeconds) * time.Second
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, ttl, ttlError{ttl})
		defer cancel()
	}
	start := time.Now()
	w.log.Debug("jobs worker: job started", "job_id", a.JobId, "queue", a.QueueName)
	result, err := call(ctx, h, a)
	if err == nil {
		w.log.Debug("jobs worker: job done", "job_id", a.JobId, "duration", time.Since(start))
		w.report(a, true, result, "")
		return
	}
	msg := err.Error()
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errStopNow):
			return // deregistering gives it back
		case errors.Is(cause, errCancelled):
			msg = errCancelled.Error()
		case errors.As(cause, new(ttlError)):
			if !errors.As(err, new(ttlError)) {
				msg = cause.Error() + ": " + msg
			}
		}
	}
	w.log.Debug("jobs worker: job failed", "job_id", a.JobId, "duration", time.Since(start), "err", msg)
	w.report(a, false, nil, msg)
}

// call runs a handler, turning a panic into the job's failure rather than
// the worker's end.
func call(ctx context.Context, h handlerFunc, a *jqpb.JobAssignment) (result []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, a)
}

// The server's limits on what a report carries.
const (
	maxErrorLen  = 4096
	maxResultLen = 1 << 20
)

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// report delivers a job's outcome, retrying while the server is
// unreachable: a job that ran should not run again for want of a report.
// It gives up on StopNow, and when the server says the job is no longer
// this worker's (its lease expired, it was cancelled or purged).
func (w *Worker) report(a *jqpb.JobAssignment, success bool, result []byte, errMsg string) {
	jobID := a.JobId
	if len(result) > maxResultLen {
		success, errMsg = false, fmt.Sprintf("the handler's result of %d bytes is over the server's limit of %d", len(result), maxResultLen)
		result = nil
	}
	req := &jqpb.ReportResultRequest{WorkerId: w.ID(), JobId: jobID, Success: success, Result: result,
		ErrorMessage: truncate(errMsg, maxErrorLen)}
	var bo backoff
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		stop := context.AfterFunc(w.hard, cancel)
		_, err := w.c.workers.ReportResult(ctx, traced(connect.NewRequest(req), a))
		stop()
		cancel()
		switch {
		case err == nil:
			return
		case w.hard.Err() != nil:
			return
		case connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeNotFound:
			w.log.Info("jobs worker: result dropped: the job is no longer this worker's", "job_id", jobID, "err", err)
			return
		case connect.CodeOf(err) == connect.CodeInvalidArgument && req.Success:
			// The result itself was refused (too large, say): the job
			// failed, and the server's reason says why.
			req = &jqpb.ReportResultRequest{WorkerId: req.WorkerId, JobId: jobID,
				ErrorMessage: truncate("reporting the result: "+err.Error(), maxErrorLen)}
			continue
		case !retryable(err):
			w.log.Error("jobs worker: result refused", "job_id", jobID, "err", err)
			return
		}
		w.log.Warn("jobs worker: reporting a result failed, retrying", "job_id", jobID, "err", err)
		if !bo.sleep(context.Background(), w.hard) {
			return
		}
	}
}

// retryable says whether a call may succeed later: the server is away,
// restarting, overloaded, or the connection broke.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition,
		connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeUnimplemented,
		connect.CodeAlreadyExists, connect.CodeOutOfRange, connect.CodeAborted:
		return false
	}
	return true
}

// backoff waits 0.1 s, doubling to 5 s, each with up to 50 % jitter so
// that workers cut off together do not come back together.
type backoff struct{ next time.Duration }

func (b *backoff) reset() { b.next = 0 }

// sleep waits for the next delay; false if a or b ended first.
func (b *backoff) sleep(a, c context.Context) bool {
	if b.next == 0 {
		b.next = 100 * time.Millisecond
	}
	d := b.next + rand.N(b.next/2)
	b.next = min(2*b.next, 5*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-a.Done():
		return false
	case <-c.Done():
		return false
	}
}

// traced puts the job's trace context (if any) on a call about it, as the
// W3C headers, so that the server's spans of the call join the job's
// trace.
func traced[T any](r *connect.Request[T], a *jqpb.JobAssignment) *connect.Request[T] {
	if a.Traceparent != "" {
		r.Header().Set("traceparent", a.Traceparent)
		if a.Tracestate != "" {
			r.Header().Set("tracestate", a.Tracestate)
		}
	}
	return r
}

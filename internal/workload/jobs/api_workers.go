package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/jqpb"
)

// Limits of the worker registry.
const (
	// DefaultMaxWorkers bounds the registry (RESOURCE_EXHAUSTED beyond).
	DefaultMaxWorkers = 10_000
	// MaxConcurrency bounds a worker's concurrency: one lease takes at
	// most that many jobs.
	MaxConcurrency = MaxLeaseBatch
	// MaxWorkerQueues bounds the queues one worker takes jobs from.
	MaxWorkerQueues = 64
	// DefaultWorkerGrace: an OFFLINE worker (no stream, not heard from
	// within a lease) is forgotten this long after it went offline, which
	// frees its place under --max-workers (--worker-grace). A worker that
	// deregisters is forgotten at once.
	DefaultWorkerGrace = 30 * time.Second
	// unsentTimeout bounds giving back jobs a stream could not push, after
	// the stream's own context has ended.
	unsentTimeout = 10 * time.Second
	// cancelBacklog bounds cancel orders waiting for a stream to send
	// them; a worker that reads none of them loses the excess (its jobs
	// still end when it reports or its lease runs out).
	cancelBacklog = 1024
)

// Hub is the worker registry and the dispatcher: it knows which streams
// wait for which queues with free slots, and wakes them when the engine
// notes that a queue gained ready jobs. It is not durable: a restarted
// node learns its workers again as they re-register (their leases are in
// the log and survive, and each new stream settles them: Reclaim).
type Hub struct {
	mu      sync.Mutex
	max     int
	lease   time.Duration
	grace   time.Duration
	workers map[string]*worker
	// byQueue: open streams by the queues they take jobs from.
	byQueue map[string][]*stream
	// owner: the worker each pushed, unreported job was pushed to.
	owner map[string]*worker
	// next: where the next wake-up starts in a queue's streams, so that
	// work spreads over them.
	next map[string]int
	now  func() time.Time
}

// NewHub returns an empty registry for at most max workers (0: default).
func NewHub(max int) *Hub {
	if max <= 0 {
		max = DefaultMaxWorkers
	}
	return &Hub{max: max, lease: DefaultLease, grace: DefaultWorkerGrace, workers: map[string]*worker{}, byQueue: map[string][]*stream{},
		owner: map[string]*worker{}, next: map[string]int{}, now: time.Now}
}

// SetGrace sets how long an offline worker is kept before it is forgotten
// (0 or less: DefaultWorkerGrace).
func (h *Hub) SetGrace(d time.Duration) *Hub {
	if d <= 0 {
		d = DefaultWorkerGrace
	}
	h.mu.Lock()
	h.grace = d
	h.mu.Unlock()
	return h
}

type worker struct {
	id, hostname string
	concurrency  int
	queues       []string
	draining     bool
	lastSeen     time.Time // registration, heartbeat, stream or report
	lastBeat     time.Time
	active       int32 // as the worker last said
	// inflight: pushed jobs not yet reported, with when they were pushed
	// (UnixNano; 0 for jobs found held when a stream opened).
	inflight map[string]int64
	stream   *stream
}

func (w *worker) free() int {
	if w.draining {
		return 0
	}
	return w.concurrency - len(w.inflight)
}

// stream is one open StreamJobs call. Its session names it in the leases
// of the jobs it pushes.
type stream struct {
	w             *worker
	session       string
	queues        []string
	acceptsCancel bool
	wake          chan struct{} // cap 1: work (or an end) may be waiting
	cancels       []string
	// end, once set, says how the stream ends: errDrained (a clean end)
	// or a connect error.
	end error
}

var errDrained = errors.New("drained")

func (s *stream) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Notify takes the workload's engine notes (engine.Options.Notify). It
// runs on the log's completion goroutine, so it only wakes streams.
func (h *Hub) Notify(v any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch n := v.(type) {
	case QueueReady:
		ss := h.byQueue[n.Queue]
		if len(ss) == 0 {
			return
		}
		start := h.next[n.Queue] % len(ss)
		left := n.Ready
		for i := 0; i < len(ss) && left > 0; i++ {
			s := ss[(start+i)%len(ss)]
			if f := s.w.free(); f > 0 {
				s.poke()
				left -= f
				h.next[n.Queue] = start + i + 1
			}
		}
	case CancelRequested:
		w := h.workers[n.Worker]
		if w == nil || w.stream == nil || !w.stream.acceptsCancel || len(w.stream.cancels) >= cancelBacklog {
			return
		}
		w.stream.cancels = append(w.stream.cancels, n.JobID)
		w.stream.poke()
	case JobEnded:
		h.untrackLocked(n.JobID)
	}
}

func (h *Hub) untrackLocked(jobID string) {
	w := h.owner[jobID]
	if w == nil {
		return
	}
	delete(h.owner, jobID)
	delete(w.inflight, jobID)
	if w.stream != nil {
		w.stream.poke()
	}
}

// counts returns the workers that are online or draining, and all known.
func (h *Hub) counts() (active, total int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.forgetLocked(now)
	for _, w := range h.workers {
		if h.statusLocked(w, now) != jqpb.WorkerStatus_OFFLINE {
			active++
		}
	}
	return active, len(h.workers)
}

// statusLocked: ONLINE while its stream is open or it beat within a
// lease, DRAINING once asked to drain, OFFLINE otherwise.
func (h *Hub) statusLocked(w *worker, now time.Time) jqpb.WorkerStatus {
	switch {
	case w.draining && (w.stream != nil || now.Sub(w.lastSeen) < h.lease):
		return jqpb.WorkerStatus_DRAINING
	case w.stream != nil || now.Sub(w.lastSeen) < h.lease:
		return jqpb.WorkerStatus_ONLINE
	}
	return jqpb.WorkerStatus_OFFLINE
}

// forgetLocked drops workers that have been OFFLINE for longer than the
// grace. Their leases are the log's business: they run out, or a new
// stream of the id settles them.
func (h *Hub) forgetLocked(now time.Time) {
	for _, w := range h.workers {
		if w.stream == nil && now.Sub(w.lastSeen) > h.lease+h.grace {
			h.dropLocked(w)
		}
	}
}

// dropLocked removes w from the registry, freeing its place.
func (h *Hub) dropLocked(w *worker) {
	for jid := range w.inflight {
		if h.owner[jid] == w {
			delete(h.owner, jid)
		}
	}
	clear(w.inflight)
	delete(h.workers, w.id)
}

// --- WorkerService ---

func (a *API) RegisterWorker(ctx context.Context, req *connect.Request[jqpb.RegisterWorkerRequest]) (*connect.Response[jqpb.RegisterWorkerResponse], error) {
	m := req.Msg
	id := m.WorkerId
	if id == "" {
		rng := a.rngs.Get().(interface{ Uint64() uint64 })
		id = "w-" + strconv.FormatUint(rng.Uint64(), 36)
		a.rngs.Put(rng)
	}
	if err := checkWorkerID(id); err != nil {
		return nil, err
	}
	if err := checkHostname(m.Hostname); err != nil {
		return nil, err
	}
	conc := int(m.Concurrency)
	if conc == 0 {
		conc = 1
	}
	if conc < 0 || conc > MaxConcurrency {
		return nil, errf(connect.CodeInvalidArgument, "concurrency must be 1 to %d (0: 1), got %d", MaxConcurrency, m.Concurrency)
	}
	queues, err := checkQueues(m.Queues)
	if err != nil {
		return nil, err
	}
	h := a.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	w := h.workers[id]
	if w == nil {
		h.forgetLocked(now)
		if len(h.workers) >= h.max {
			return nil, errf(connect.CodeResourceExhausted, "%d workers are registered, the limit (--max-workers); a worker's place is freed when it deregisters, or %v after it went offline (--worker-grace)", len(h.workers), h.grace)
		}
		w = &worker{id: id, inflight: map[string]int64{}}
		h.workers[id] = w
	}
	w.hostname, w.concurrency, w.queues, w.draining, w.lastSeen = m.Hostname, conc, queues, false, now
	if w.stream != nil {
		w.stream.poke() // more slots, perhaps
	}
	return connect.NewResponse(&jqpb.RegisterWorkerResponse{WorkerId: id}), nil
}

func checkQueues(qs []string) ([]string, error) {
	if len(qs) == 0 {
		return []string{DefaultQueue}, nil
	}
	if len(qs) > MaxWorkerQueues {
		return nil, errf(connect.CodeInvalidArgument, "a worker takes jobs from at most %d queues, got %d", MaxWorkerQueues, len(qs))
	}
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		if err := checkQueueName("queues", q); err != nil {
			return nil, err
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out, nil
}

// checkHeld validates the jobs a worker says it holds (nil: it does not
// say, as jq's workers).
func checkHeld(h *jqpb.HeldJobs) (ids []string, declared bool, err error) {
	if h == nil {
		return nil, false, nil
	}
	if len(h.JobIds) > MaxHeldJobs {
		return nil, true, errf(connect.CodeInvalidArgument, "held.job_ids names %d jobs; at most %d", len(h.JobIds), MaxHeldJobs)
	}
	for _, id := range h.JobIds {
		if err := invalid("held.job_ids", api.CheckID(id, 1, MaxIDLen)); err != nil {
			return nil, true, err
		}
	}
	return h.JobIds, true, nil
}

// byPartition splits job ids by the partition that holds each.
func (a *API) byPartition(ids []string) [][]string {
	per := make([][]string, a.parts)
	for _, id := range ids {
		p := a.eng.PartitionOf(JobKey(id))
		per[p] = append(per[p], id)
	}
	return per
}

func (a *API) Heartbeat(ctx context.Context, req *connect.Request[jqpb.HeartbeatRequest]) (*connect.Response[jqpb.HeartbeatResponse], error) {
	id := req.Msg.WorkerId
	if err := checkWorkerID(id); err != nil {
		return nil, err
	}
	ids, declared, err := checkHeld(req.Msg.Held)
	if err != nil {
		return nil, err
	}
	sent := a.hub.now().UnixNano()
	// A worker that lists its jobs extends those, whether or not this node
	// knows it (its leases are in the log and outlive a restart that
	// emptied the registry). One that does not extends the jobs of its
	// live stream here, and with none here, nothing: a process that
	// restarted under the same id holds none of its predecessor's jobs.
	session := ""
	if !declared {
		session = a.hub.liveSession(id)
	}
	per := a.byPartition(ids)
	held := make([][]string, a.parts)
	err = a.all(func(p int) error {
		r, err := engine.Do[*Result](ctx, a.eng, p, WorkloadID, &Extend{Worker: id, Session: session, LeaseNs: a.leaseNs, Declared: declared, JobIDs: per[p]})
		if err != nil {
			return api.GRPCEngineError(err)
		}
		if err := outcomeErr(r); err != nil {
			return err
		}
		for _, j := range r.Jobs {
			held[p] = append(held[p], j.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.hub.beat(id, req.Msg.ActiveJobCount, sent, held)
	return connect.NewResponse(&jqpb.HeartbeatResponse{}), nil
}

// liveSession is the session of the worker's open stream on this node.
func (h *Hub) liveSession(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.workers[id]; w != nil && w.stream != nil {
		return w.stream.session
	}
	return ""
}

// beat records a heartbeat: a job pushed before it started (sent) and no
// longer held (its lease ran out, it was given to another) frees its slot.
func (h *Hub) beat(id string, active int32, sent int64, held [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.workers[id]
	if w == nil {
		return
	}
	w.lastSeen, w.lastBeat, w.active = h.now(), h.now(), active
	still := map[string]bool{}
	for _, ids := range held {
		for _, id := range ids {
			still[id] = true
		}
	}
	for jid, at := range w.inflight {
		if at < sent && !still[jid] {
			delete(w.inflight, jid)
			delete(h.owner, jid)
		}
	}
	if w.stream != nil {
		w.stream.poke()
	}
}

func (a *API) AckJob(ctx context.Context, req *connect.Request[jqpb.AckJobRequest]) (*connect.Response[jqpb.AckJobResponse], error) {
	m := req.Msg
	if err := checkWorkerID(m.WorkerId); err != nil {
		return nil, err
	}
	if err := checkJobID(m.JobId); err != nil {
		return nil, err
	}
	if _, err := a.do(ctx, JobKey(m.JobId), &Ack{JobID: m.JobId, Worker: m.WorkerId}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.AckJobResponse{}), nil
}

func (a *API) ReportResult(ctx context.Context, req *connect.Request[jqpb.ReportResultRequest]) (*connect.Response[jqpb.ReportResultResponse], error) {
	m := req.Msg
	if err := checkWorkerID(m.WorkerId); err != nil {
		return nil, err
	}
	if err := checkJobID(m.JobId); err != nil {
		return nil, err
	}
	if err := checkErrorMessage(m.ErrorMessage); err != nil {
		return nil, err
	}
	if len(m.Result) > MaxPayloadBytes {
		return nil, errf(connect.CodeResourceExhausted, "result of %d bytes is over the limit of %d", len(m.Result), MaxPayloadBytes)
	}
	_, err := a.do(ctx, JobKey(m.JobId), &Report{JobID: m.JobId, Worker: m.WorkerId, Success: m.Success, Result: m.Result, Error: m.ErrorMessage})
	var ce *connect.Error
	if err == nil || errors.As(err, &ce) && (ce.Code() == connect.CodeFailedPrecondition || ce.Code() == connect.CodeNotFound) {
		// Reported, or no longer this worker's: either way its slot is free.
		h := a.hub
		h.mu.Lock()
		if w := h.owner[m.JobId]; w != nil && w.id == m.WorkerId {
			h.untrackLocked(m.JobId)
		}
		if w := h.workers[m.WorkerId]; w != nil {
			w.lastSeen = h.now()
		}
		h.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.ReportResultResponse{}), nil
}

// release gives back every job the worker holds, on every partition.
func (a *API) release(ctx context.Context, id string) error {
	return a.all(func(p int) error {
		r, err := engine.Do[*Result](ctx, a.eng, p, WorkloadID, &Release{Worker: id})
		if err != nil {
			return api.GRPCEngineError(err)
		}
		return outcomeErr(r)
	})
}

func (a *API) Deregister(ctx context.Context, req *connect.Request[jqpb.DeregisterRequest]) (*connect.Response[jqpb.DeregisterResponse], error) {
	id := req.Msg.WorkerId
	if err := checkWorkerID(id); err != nil {
		return nil, err
	}
	if err := a.release(ctx, id); err != nil {
		return nil, err
	}
	h := a.hub
	h.mu.Lock()
	if w := h.workers[id]; w != nil {
		if w.stream != nil && w.stream.end == nil {
			w.stream.end = errDrained
			w.stream.poke()
		}
		// Gone: its place under --max-workers is free at once.
		h.dropLocked(w)
	}
	h.mu.Unlock()
	return connect.NewResponse(&jqpb.DeregisterResponse{}), nil
}

// --- the stream ---

func (a *API) StreamJobs(ctx context.Context, req *connect.Request[jqpb.StreamJobsRequest], out *connect.ServerStream[jqpb.JobAssignment]) error {
	m := req.Msg
	if err := checkWorkerID(m.WorkerId); err != nil {
		return err
	}
	var queues []string
	if len(m.Queues) > 0 {
		var err error
		if queues, err = checkQueues(m.Queues); err != nil {
			return err
		}
	}
	// Every queue must exist: a worker waiting on a misspelt queue would
	// wait for ever.
	if queues == nil {
		a.hub.mu.Lock()
		if w := a.hub.workers[m.WorkerId]; w != nil {
			queues = w.queues
		}
		a.hub.mu.Unlock()
	}
	for _, q := range queues {
		stats, err := query[*Stats](ctx, a, QueueKey(q), GetStats{Name: q})
		if err != nil {
			return err
		}
		if stats == nil {
			return errf(connect.CodeNotFound, "no queue %q; create it first (AdminService.CreateQueue)", q)
		}
	}
	held, declared, err := checkHeld(m.Held)
	if err != nil {
		return err
	}
	s, err := a.hub.open(m.WorkerId, queues, m.AcceptsCancel, a.newSession())
	if err != nil {
		return err
	}
	defer a.hub.close(s)
	// Headers now: a gRPC client's call returns only once they arrive,
	// and a worker may wait long for its first job.
	if err := out.Send(nil); err != nil {
		return err
	}
	if err := a.reclaim(ctx, s, out, declared, held); err != nil {
		return err
	}
	return a.serveStream(ctx, s, out)
}

// newSession draws the id of a new stream.
func (a *API) newSession() string {
	rng := a.rngs.Get().(interface{ Uint64() uint64 })
	defer a.rngs.Put(rng)
	return "s-" + strconv.FormatUint(rng.Uint64(), 36)
}

// reclaim settles, on every partition, the jobs the worker's id holds
// from older streams (Reclaim): those this one holds now take its slots,
// and a worker that did not declare what it holds is sent them again.
func (a *API) reclaim(ctx context.Context, s *stream, out *connect.ServerStream[jqpb.JobAssignment], declared bool, held []string) error {
	per := a.byPartition(held)
	got := make([][]*Job, a.parts)
	// Not cancelled with the stream: a Reclaim applied but unanswered
	// would leave jobs under this session with no one to send them to.
	bg := context.WithoutCancel(ctx)
	err := a.all(func(p int) error {
		r, err := engine.Do[*Result](bg, a.eng, p, WorkloadID, &Reclaim{Worker: s.w.id, Session: s.session, LeaseNs: a.leaseNs, Declared: declared, Keep: per[p]})
		if err != nil {
			return api.GRPCEngineError(err)
		}
		got[p] = r.Jobs
		return outcomeErr(r)
	})
	var jobs []*Job
	for _, js := range got {
		jobs = append(jobs, js...)
	}
	adopted := a.hub.adopt(s, jobs)
	if declared {
		// The process holds what it declared: they stay its, under this
		// session or (if a newer stream replaced this one) the next.
		if !adopted {
			return a.hub.ended(s)
		}
		a.hub.resendCancels(s, jobs)
		return err
	}
	// Offered again but not sent: nobody has them.
	n := 0
	switch {
	case !adopted:
		err = a.hub.ended(s)
	case err == nil:
		n, err = sendJobs(ctx, out, jobs)
	}
	if n < len(jobs) {
		a.unsent(ctx, s, jobs[n:])
	}
	return err
}

// open registers the stream, replacing an older one of the worker.
func (h *Hub) open(id string, queues []string, acceptsCancel bool, session string) (*stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.workers[id]
	if w == nil {
		return nil, errf(connect.CodeNotFound, "worker %q is not registered; call RegisterWorker first", id)
	}
	if queues == nil {
		queues = w.queues
	}
	if old := w.stream; old != nil {
		// Not ABORTED, which orders a shutdown: a worker whose stream is
		// replaced must not deregister (that would give back the newer
		// stream's jobs).
		old.end = errf(connect.CodeAlreadyExists, "replaced by a newer StreamJobs of worker %q", id)
		old.poke()
		h.unlinkLocked(old)
	}
	s := &stream{w: w, session: session, queues: queues, acceptsCancel: acceptsCancel, wake: make(chan struct{}, 1)}
	w.stream, w.lastSeen = s, h.now()
	for _, q := range queues {
		h.byQueue[q] = append(h.byQueue[q], s)
	}
	s.poke() // look for work at once
	return s, nil
}

// adopt makes the jobs the stream's Reclaim left to it the worker's
// unreported ones: whatever older streams had counted is settled now. It
// is false if the stream has ended or been replaced meanwhile.
func (h *Hub) adopt(s *stream, jobs []*Job) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.end != nil || s.w.stream != s {
		return false
	}
	w := s.w
	for jid := range w.inflight {
		if h.owner[jid] == w {
			delete(h.owner, jid)
		}
	}
	clear(w.inflight)
	now := h.now().UnixNano()
	for _, j := range jobs {
		w.inflight[j.ID] = now
		h.owner[j.ID] = w
	}
	return true
}

// resendCancels queues cancel orders for kept jobs cancelled meanwhile:
// an order sent while the worker had no stream was lost.
func (h *Hub) resendCancels(s *stream, jobs []*Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !s.acceptsCancel {
		return
	}
	for _, j := range jobs {
		if j.CancelAsked && len(s.cancels) < cancelBacklog {
			s.cancels = append(s.cancels, j.ID)
		}
	}
	if len(s.cancels) > 0 {
		s.poke()
	}
}

// ended is how a stream that ended or was replaced returns.
func (h *Hub) ended(s *stream) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.end == nil || s.end == errDrained {
		return nil
	}
	return s.end
}

func (h *Hub) unlinkLocked(s *stream) {
	for _, q := range s.queues {
		ss := slices.DeleteFunc(h.byQueue[q], func(x *stream) bool { return x == s })
		if len(ss) == 0 {
			delete(h.byQueue, q)
			delete(h.next, q)
		} else {
			h.byQueue[q] = ss
		}
	}
}

func (h *Hub) close(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.w.stream == s {
		s.w.stream = nil
		s.w.lastSeen = h.now()
		h.unlinkLocked(s)
	}
}

// step takes what the stream should do next under the lock: the cancels
// to send, how many jobs it may take, and its end.
func (h *Hub) step(s *stream) (cancels []string, free int, end error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.end != nil {
		return nil, 0, s.end
	}
	cancels, s.cancels = s.cancels, nil
	return cancels, min(s.w.free(), MaxLeaseBatch), nil
}

// track records jobs leased for the stream's worker; false if the stream
// has ended or been replaced, and so will not push them.
func (h *Hub) track(s *stream, jobs []*Job) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.end != nil || s.w.stream != s {
		return false
	}
	now := h.now().UnixNano()
	for _, j := range jobs {
		s.w.inflight[j.ID] = now
		h.owner[j.ID] = s.w
	}
	return true
}

// untrack forgets jobs given back.
func (h *Hub) untrack(jobs []*Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, j := range jobs {
		h.untrackLocked(j.ID)
	}
}

// unsent gives back jobs the stream leased but did not push: nobody has
// them, so they must not wait for their leases to run out.
func (a *API) unsent(ctx context.Context, s *stream, jobs []*Job) {
	if len(jobs) == 0 {
		return
	}
	a.hub.untrack(jobs)
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unsentTimeout)
	defer cancel()
	for p, ids := range a.byPartition(ids) {
		if len(ids) == 0 {
			continue
		}
		// On failure the leases still run out: at least once, later.
		_, _ = a.eng.Do(uctx, p, WorkloadID, &Unsent{Worker: s.w.id, Session: s.session, JobIDs: ids})
	}
}

// BatchFlusher lets a stream's sends be held and written out together: the
// server's stream wrapper implements it, so the jobs of one lease leave in
// one HTTP/2 write instead of a write and a flush each (most of a busy
// server's CPU is such writes).
type BatchFlusher interface {
	Hold()    // from now, a flush only marks the stream for one
	Release() // flushes once if anything was marked, and stops holding
}

type flusherKey struct{}

// WithBatchFlusher returns ctx carrying f for the stream's handler.
func WithBatchFlusher(ctx context.Context, f BatchFlusher) context.Context {
	return context.WithValue(ctx, flusherKey{}, f)
}

// sendJobs sends a lease's jobs, with one flush if the server can batch;
// n is how many were sent before an error.
func sendJobs(ctx context.Context, out *connect.ServerStream[jqpb.JobAssignment], jobs []*Job) (n int, err error) {
	err = guarded(ctx, func() error {
		if f, ok := ctx.Value(flusherKey{}).(BatchFlusher); ok && len(jobs) > 1 {
			f.Hold()
			defer f.Release()
		}
		for _, j := range jobs {
			if err := out.Send(&jqpb.JobAssignment{JobId: j.ID, QueueName: j.Queue, Payload: j.Payload, Priority: j.Priority,
				TtlSeconds: int32(min(j.TTLNs/1e9, MaxTTLSeconds))}); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// guarded runs a stream's send within the server's stall timeout when
// the server gave the stream one (api.Stream): a worker that stops
// reading ends its stream instead of holding it for ever, and the jobs
// it did not read go back (Unsent). The stream holds one rendered
// message at a time.
func guarded(ctx context.Context, send func() error) error {
	if st := api.StreamOf(ctx); st != nil {
		return st.Send(send)
	}
	return send()
}

// serveStream pushes jobs as they become ready: it leases from its
// queues whenever it has free slots and a note (or a report, or its
// opening) says there may be work, and sleeps otherwise. A wake-up that
// finds nothing costs one unlogged Lease per queue.
func (a *API) serveStream(ctx context.Context, s *stream, out *connect.ServerStream[jqpb.JobAssignment]) error {
	// Leases are not cancelled with the stream: a lease applied but
	// unanswered could not be given back.
	bg := context.WithoutCancel(ctx)
	next := 0
	for {
		cancels, free, end := a.hub.step(s)
		if end != nil {
			if end == errDrained {
				return nil
			}
			return end
		}
		for _, id := range cancels {
			if err := guarded(ctx, func() error { return out.Send(&jqpb.JobAssignment{JobId: id, Cancel: true}) }); err != nil {
				return err
			}
		}
		retry := false
		for i := 0; i < len(s.queues) && free > 0; i++ {
			q := s.queues[(next+i)%len(s.queues)]
			r, err := engine.Do[*Result](bg, a.eng, a.eng.PartitionOf(QueueKey(q)), WorkloadID, &Lease{Queue: q, Worker: s.w.id, Max: int32(free), LeaseNs: a.leaseNs, Session: s.session})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if errors.Is(err, engine.ErrOverloaded) {
					retry = true
					continue
				}
				return api.GRPCEngineError(err)
			}
			if r.Outcome == NotFound {
				continue // deleted since: nothing to take
			}
			if len(r.Jobs) == 0 {
				continue
			}
			if ctx.Err() != nil || !a.hub.track(s, r.Jobs) {
				a.unsent(ctx, s, r.Jobs)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return a.hub.ended(s)
			}
			if n, err := sendJobs(ctx, out, r.Jobs); err != nil {
				// The worker is gone: what did not leave goes back now;
				// what left is its until a new stream of it or the
				// lease's end settles it.
				a.unsent(ctx, s, r.Jobs[n:])
				return err
			}
			// With no slot left, the queue may still hold ready jobs: a
			// report frees a slot and wakes this loop to take them.
			free -= len(r.Jobs)
		}
		next++
		if retry {
			// The partition shed the lease: try again after a pause.
			select {
			case <-s.wake:
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			case <-a.done:
				return errf(connect.CodeUnavailable, "the server is shutting down; reconnect")
			}
			continue
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-a.done:
			return errf(connect.CodeUnavailable, "the server is shutting down; reconnect")
		}
	}
}

// --- AdminService: workers ---

func (a *API) ListWorkers(ctx context.Context, _ *connect.Request[jqpb.ListWorkersRequest]) (*connect.Response[jqpb.ListWorkersResponse], error) {
	h := a.hub
	h.mu.Lock()
	now := h.now()
	h.forgetLocked(now)
	out := make([]*jqpb.Worker, 0, len(h.workers))
	for _, w := range h.workers {
		pw := &jqpb.Worker{WorkerId: w.id, Hostname: w.hostname, Status: h.statusLocked(w, now), Concurrency: int32(w.concurrency),
			ActiveJobCount: int32(len(w.inflight)), Queues: slices.Clone(w.queues)}
		if !w.lastBeat.IsZero() {
			pw.LastHeartbeat = ts(w.lastBeat.UnixNano())
		}
		out = append(out, pw)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(x, y *jqpb.Worker) int {
		switch {
		case x.WorkerId < y.WorkerId:
			return -1
		case x.WorkerId > y.WorkerId:
			return 1
		}
		return 0
	})
	return connect.NewResponse(&jqpb.ListWorkersResponse{Workers: out}), nil
}

// DrainWorker stops pushing to the worker and ends its stream cleanly,
// which tells a Surge worker to finish its jobs, report them and leave.
func (a *API) DrainWorker(ctx context.Context, req *connect.Request[jqpb.DrainWorkerRequest]) (*connect.Response[jqpb.DrainWorkerResponse], error) {
	if err := a.endWorker(req.Msg.WorkerId, true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.DrainWorkerResponse{}), nil
}

// ShutdownWorker ends the worker's stream with ABORTED, which tells a
// Surge worker to stop its jobs at once and deregister (giving them back).
func (a *API) ShutdownWorker(ctx context.Context, req *connect.Request[jqpb.ShutdownWorkerRequest]) (*connect.Response[jqpb.ShutdownWorkerResponse], error) {
	if err := a.endWorker(req.Msg.WorkerId, false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.ShutdownWorkerResponse{}), nil
}

func (a *API) endWorker(id string, drain bool) error {
	if err := checkWorkerID(id); err != nil {
		return err
	}
	h := a.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.workers[id]
	if w == nil {
		return errf(connect.CodeNotFound, "no worker %q", id)
	}
	w.draining = true
	if s := w.stream; s != nil {
		if drain {
			s.end = errDrained
		} else {
			s.end = errf(connect.CodeAborted, "worker %q was shut down by an operator: stop its jobs and deregister", id)
		}
		s.poke()
	}
	return nil
}

// String helps tests and logs.
func (w *worker) String() string {
	return fmt.Sprintf("worker %s (%d/%d)", w.id, len(w.inflight), w.concurrency)
}

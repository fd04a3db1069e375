package jobs

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

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
	// byQueue: open streams by the queues they take jobs from; linked
	// counts its entries (stored under mu), so that a submit, and a
	// queue's ready jobs, find that no stream waits without the lock
	// every submit would otherwise take.
	byQueue map[string][]*stream
	linked  atomic.Int64
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
	// reserved: slots of jobs being reported whose report also leases
	// the next job (api_report_lease.go).
	reserved int
	// passing: the jobs being reported whose report leases the next
	// (reserveNext), each in inflight while its successor is in
	// reserved: one slot counted twice until the report returns, which
	// free counts once. Always a subset of inflight (forget).
	passing map[string]struct{}
}

// free is how many more jobs the worker may be given: its concurrency
// less the jobs it holds and the slots reserved for jobs on their way,
// a reported job and its successor counting as one.
func (w *worker) free() int {
	if w.draining {
		return 0
	}
	return w.concurrency - len(w.inflight) - w.reserved + len(w.passing)
}

// forget drops jobID from what the worker holds.
func (w *worker) forget(jobID string) {
	delete(w.inflight, jobID)
	delete(w.passing, jobID)
}

// forgetAll drops every job the worker holds.
func (w *worker) forgetAll() {
	clear(w.inflight)
	clear(w.passing)
}

// stream is one open StreamJobs call. Its session names it in the leases
// of the jobs it pushes.
type stream struct {
	w             *worker
	session       string
	queues        []string
	acceptsCancel bool
	wake          chan struct{} // cap 1: work (or an end) may be waiting
	handoff       chan struct{} // cap 1: jobs leased for the stream wait in pending
	// settled: its Reclaim is done and its slots counted (adopt); only
	// then may reports and submits lease for it.
	settled bool
	cancels []string
	// end, once set, says how the stream ends: errDrained (a clean end)
	// or a connect error.
	end error
	// pending: jobs reports leased for the stream, counted in its
	// worker's inflight, to push (api_report_lease.go).
	pending       []*Job
	pendingTraces map[string]engine.TraceContext
	// leasing: the slots its own Lease reserved (reserveLease), counted
	// in its worker's reserved too.
	leasing int
}

var errDrained = errors.New("drained")

func (s *stream) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Linked says whether a worker stream is open, to be woken by QueueReady
// notes (Options.Listening).
func (h *Hub) Linked() bool { return h.linked.Load() > 0 }

// Notify takes the workload's engine notes (engine.Options.Notify). It
// runs on the log's completion goroutine, so it only wakes streams.
func (h *Hub) Notify(v any) {
	if _, ok := v.(QueueReady); ok && h.linked.Load() == 0 {
		// No stream to wake; one that links later looks for work at
		// once (open).
		return
	}
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
			// The slots its own Lease holds count: that Lease may have
			// been applied before these jobs were, and found none.
			if f := s.w.free() + s.leasing; f > 0 {
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
	w.forget(jobID)
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
	w.forgetAll()
	delete(h.workers, w.id)
}

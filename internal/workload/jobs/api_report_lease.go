package jobs

import (
	"context"

	"github.com/surge-run/surge/internal/engine"
)

// A report of a job its worker's stream pushed carries that stream's next
// lease (Report.Next): the job that takes the freed slot is leased in the
// report's own log entry and reaches the stream once that entry is
// durable, where a report and then the stream's own lease took two
// fsyncs and a wake-up in between (most of a busy stream's dispatch
// time). Only a stream that takes jobs from one queue does so, so that
// a stream over several queues keeps taking them in turn. Likewise a
// submit while a stream of its queue waits with free slots leases that
// stream its next job in the submit's entry (SubmitLease; a SubmitJobs
// batch as many as the stream has free slots, SubmitBatchLease). The
// slots are reserved from before the command until it returns, so a
// worker never gets more than its concurrency.

// nextJobs is how many jobs a report or a single submit leases for a
// stream: the one slot it frees or fills.
const nextJobs = 1

// reserveNext reserves the slot of jobID, which workerID reports, for the
// stream that will take the next job; nil if no stream can (none open,
// several queues, draining, or the job is not one it was pushed).
func (h *Hub) reserveNext(workerID, jobID string) *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.workers[workerID]
	if w == nil || h.owner[jobID] != w {
		return nil
	}
	s := w.stream
	// free() still counts jobID's slot as busy: >= 0 means that slot,
	// once reported, is one the worker may fill.
	if s == nil || !s.settled || s.end != nil || len(s.queues) != 1 || w.free() < 0 || w.draining {
		return nil
	}
	if _, twice := w.passing[jobID]; twice {
		return nil // a second report of it while the first is on its way
	}
	w.reserved++
	if w.passing == nil {
		w.passing = map[string]struct{}{}
	}
	w.passing[jobID] = struct{}{}
	return s
}

// reported settles a report under the hub's lock: the reported job's slot
// is free, the reservation (if s) ends, and the jobs the report leased go
// to s to push, in one step so that the stream never sees the slot both
// free and unreserved before its next job is counted. It returns the
// jobs nobody will push (s ended meanwhile), to give back.
func (h *Hub) reported(workerID, jobID string, freed bool, s *stream, r *Result) (orphans []*Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s != nil {
		delete(s.w.passing, jobID) // with the reservation, below
	}
	if freed {
		if w := h.owner[jobID]; w != nil && w.id == workerID {
			h.untrackLocked(jobID)
		}
		if w := h.workers[workerID]; w != nil {
			w.lastSeen = h.now()
		}
	}
	if s == nil {
		return nil
	}
	return h.deliverLocked(s, nextJobs, r)
}

// reserveFor reserves up to want free slots of a stream that takes jobs
// from queue, for the jobs a submit will lease to it; nil if no stream
// has one. The streams take turns as for QueueReady notes.
func (h *Hub) reserveFor(queue string, want int) (*stream, int) {
	if h.linked.Load() == 0 {
		// No stream at all: the job waits PENDING, and a stream that
		// links meanwhile finds it when it looks for work on linking.
		return nil, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ss := h.byQueue[queue]
	if len(ss) == 0 {
		return nil, 0
	}
	start := h.next[queue] % len(ss)
	for i := range ss {
		s := ss[(start+i)%len(ss)]
		if f := s.w.free(); s.settled && s.end == nil && s.w.stream == s && f > 0 {
			k := min(f, want, MaxLeaseBatch)
			s.w.reserved += k
			h.next[queue] = start + i + 1
			return s, k
		}
	}
	return nil, 0
}

// delivered ends s's reservation of k slots and hands it what the command
// leased; it returns the jobs nobody will push, to give back.
func (h *Hub) delivered(s *stream, k int, r *Result) (orphans []*Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deliverLocked(s, k, r)
}

func (h *Hub) deliverLocked(s *stream, k int, r *Result) (orphans []*Job) {
	s.w.reserved -= k
	var next []*Job
	if r != nil {
		next = r.Next
	}
	if len(next) == 0 {
		s.poke() // the reserved slots are free again
		return nil
	}
	if s.end != nil || s.w.stream != s {
		return next
	}
	now := h.now().UnixNano()
	for _, j := range next {
		s.w.inflight[j.ID] = now
		h.owner[j.ID] = s.w
	}
	s.pending = append(s.pending, next...)
	for id, tc := range r.Traces {
		if s.pendingTraces == nil {
			s.pendingTraces = map[string]engine.TraceContext{}
		}
		s.pendingTraces[id] = tc
	}
	select {
	case s.handoff <- struct{}{}:
	default:
	}
	return nil
}

// takePending hands the stream the jobs reports leased for it.
func (h *Hub) takePending(s *stream) ([]*Job, map[string]engine.TraceContext) {
	h.mu.Lock()
	defer h.mu.Unlock()
	jobs, traces := s.pending, s.pendingTraces
	s.pending, s.pendingTraces = nil, nil
	return jobs, traces
}

// closeStream unregisters the stream and gives back what reports leased
// for it that it did not push.
func (a *API) closeStream(ctx context.Context, s *stream) {
	a.hub.close(s)
	if left, _ := a.hub.takePending(s); len(left) > 0 {
		a.unsent(ctx, s, left)
	}
}

// pushPending sends the jobs reports leased for the stream; stop: the
// stream ends, returning err, and what it did not send goes back.
func (a *API) pushPending(ctx context.Context, s *stream, out assignments) (stop bool, err error) {
	jobs, traces := a.hub.takePending(s)
	if len(jobs) == 0 {
		return false, nil
	}
	if ctx.Err() != nil {
		a.unsent(ctx, s, jobs)
		return true, ctx.Err()
	}
	if n, err := sendJobs(ctx, out, jobs, traces); err != nil {
		a.unsent(ctx, s, jobs[n:])
		return true, err
	}
	return false, nil
}

// submitOne submits a job; if a stream of its queue waits with a free
// slot, the same log entry leases it its next job (SubmitLease).
func (a *API) submitOne(ctx context.Context, s *Submit) (*Result, error) {
	st, k := a.hub.reserveFor(s.Queue, nextJobs)
	if st == nil {
		return a.do(ctx, QueueKey(s.Queue), s)
	}
	return a.submitLeasing(ctx, s.Queue, st, k, &SubmitLease{Submit: *s, Worker: st.w.id, Session: st.session, Next: int32(k), LeaseNs: a.leaseNs})
}

// submitMany is submitOne for a SubmitJobs batch: a waiting stream may
// take as many of the queue's jobs as it has free slots, up to the batch.
func (a *API) submitMany(ctx context.Context, b *SubmitBatch) (*Result, error) {
	q := b.Jobs[0].Queue
	st, k := a.hub.reserveFor(q, len(b.Jobs))
	if st == nil {
		return a.do(ctx, QueueKey(q), b)
	}
	return a.submitLeasing(ctx, q, st, k, &SubmitBatchLease{SubmitBatch: *b, Worker: st.w.id, Session: st.session, Next: int32(k), LeaseNs: a.leaseNs})
}

func (a *API) submitLeasing(ctx context.Context, queue string, st *stream, k int, cmd engine.Command) (*Result, error) {
	// Not cancelled with the call: what a submit applied but unanswered
	// leased would reach nobody until its lease ran out.
	r, err := a.do(context.WithoutCancel(ctx), QueueKey(queue), cmd)
	if r != nil && len(r.Next) > 0 {
		a.metrics.leased(queue, r.Next)
	}
	if orphans := a.hub.delivered(st, k, r); len(orphans) > 0 {
		a.unsent(ctx, st, orphans)
	}
	return r, err
}

package jobs

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/jqpb"
)

// streamRetryPause: how long a stream waits before it leases again after
// a partition shed its lease (unless a note or report wakes it first).
const streamRetryPause = 10 * time.Millisecond

func (a *API) StreamJobs(ctx context.Context, req *connect.Request[jqpb.StreamJobsRequest], out *connect.ServerStream[jqpb.JobAssignment]) error {
	return a.streamJobs(ctx, req.Msg, out)
}

// assignments is where a worker stream's messages go: a connect stream, or
// a grpc-go one (grpcAssignments). Send(nil) sends the headers alone.
type assignments interface {
	Send(*jqpb.JobAssignment) error
}

func (a *API) streamJobs(ctx context.Context, m *jqpb.StreamJobsRequest, out assignments) error {
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
	defer a.closeStream(ctx, s)
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
func (a *API) reclaim(ctx context.Context, s *stream, out assignments, declared bool, held []string) error {
	per := a.byPartition(held)
	got := make([][]*Job, a.parts)
	traces := make([]map[string]engine.TraceContext, a.parts)
	// Not cancelled with the stream: a Reclaim applied but unanswered
	// would leave jobs under this session with no one to send them to.
	bg := context.WithoutCancel(ctx)
	err := a.all(func(p int) error {
		r, err := engine.Do[*Result](bg, a.eng, p, WorkloadID, &Reclaim{Worker: s.w.id, Session: s.session, LeaseNs: a.leaseNs, Declared: declared, Keep: per[p]})
		if err != nil {
			return api.GRPCEngineError(err)
		}
		got[p], traces[p] = r.Jobs, r.Traces
		return outcomeErr(r)
	})
	var jobs []*Job
	var traced map[string]engine.TraceContext
	for p, js := range got {
		jobs = append(jobs, js...)
		if len(traces[p]) > 0 && traced == nil {
			traced = map[string]engine.TraceContext{}
		}
		maps.Copy(traced, traces[p])
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
		n, err = sendJobs(ctx, out, jobs, traced)
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
	s := &stream{w: w, session: session, queues: queues, acceptsCancel: acceptsCancel, wake: make(chan struct{}, 1),
		handoff: make(chan struct{}, 1)}
	w.stream, w.lastSeen = s, h.now()
	for _, q := range queues {
		h.byQueue[q] = append(h.byQueue[q], s)
	}
	h.linked.Add(int64(len(queues)))
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
	// A report in flight now counts its job and its successor apart
	// again, as before reserveNext: fewer slots, never more.
	w.forgetAll()
	now := h.now().UnixNano()
	for _, j := range jobs {
		w.inflight[j.ID] = now
		h.owner[j.ID] = w
	}
	s.settled = true
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
		n := len(h.byQueue[q])
		ss := slices.DeleteFunc(h.byQueue[q], func(x *stream) bool { return x == s })
		h.linked.Add(int64(len(ss) - n))
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

// reserveLease reserves up to want of s's free slots for a Lease of the
// stream's own, as reserveFor does for a submit's, and returns how many:
// a slot the stream counted free (step) could otherwise be filled by a
// submit or a report that leases for it while its Lease waits for the
// log, and both would lease it, over the worker's concurrency.
func (h *Hub) reserveLease(s *stream, want int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := max(0, min(s.w.free(), want, MaxLeaseBatch))
	s.w.reserved += k
	s.leasing += k
	return k
}

// unreserve ends a reservation of reserveLease.
func (h *Hub) unreserve(s *stream, k int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.unreserveLocked(k)
}

func (s *stream) unreserveLocked(k int) {
	s.w.reserved -= k
	s.leasing -= k
}

// track records jobs leased for the stream's worker and ends the
// reservation (reserveLease) of the reserved slots they were leased in,
// in one step, so that no slot is ever both free and uncounted; false if
// the stream has ended or been replaced, and so will not push them.
func (h *Hub) track(s *stream, jobs []*Job, reserved int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.unreserveLocked(reserved)
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
// traces holds the dispatch's trace context of the traced ones.
func sendJobs(ctx context.Context, out assignments, jobs []*Job, traces map[string]engine.TraceContext) (n int, err error) {
	err = guarded(ctx, func() error {
		if f, ok := ctx.Value(flusherKey{}).(BatchFlusher); ok && len(jobs) > 1 {
			f.Hold()
			defer f.Release()
		}
		for _, j := range jobs {
			if err := out.Send(&jqpb.JobAssignment{JobId: j.ID, QueueName: j.Queue, Payload: j.Payload, Priority: j.Priority,
				TtlSeconds: int32(min(j.TTLNs/1e9, MaxTTLSeconds)), Traceparent: traces[j.ID].Traceparent()}); err != nil {
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
func (a *API) serveStream(ctx context.Context, s *stream, out assignments) error {
	// Leases are not cancelled with the stream: a lease applied but
	// unanswered could not be given back.
	bg := context.WithoutCancel(ctx)
	look := true // the opening: look for work at once
	for next := 0; ; next++ {
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
		if stop, err := a.pushPending(ctx, s, out); stop {
			return err
		}
		var shed bool
		if look {
			var stop bool
			var err error
			if shed, stop, err = a.leaseRound(ctx, bg, s, out, next, free); stop {
				return err
			}
		}
		var err error
		if look, err = a.awaitWork(ctx, s, shed); err != nil {
			return err
		}
	}
}

// leaseRound leases for the stream from each of its queues in turn,
// starting at the next one, while it has free slots, and sends the jobs.
// shed: a partition shed a lease, to try again after a pause. stop: the
// stream ends, returning err (nil: cleanly).
func (a *API) leaseRound(ctx, bg context.Context, s *stream, out assignments, next, free int) (shed, stop bool, err error) {
	for i := 0; i < len(s.queues) && free > 0; i++ {
		q := s.queues[(next+i)%len(s.queues)]
		k := a.hub.reserveLease(s, free)
		if k == 0 {
			break // a submit or a report took the slots meanwhile
		}
		r, err := engine.Do[*Result](bg, a.eng, a.eng.PartitionOf(QueueKey(q)), WorkloadID, &Lease{Queue: q, Worker: s.w.id, Max: int32(k), LeaseNs: a.leaseNs, Session: s.session})
		if err != nil || r.Outcome == NotFound || len(r.Jobs) == 0 {
			a.hub.unreserve(s, k)
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, true, ctx.Err()
			}
			if errors.Is(err, engine.ErrOverloaded) {
				shed = true
				continue
			}
			return false, true, api.GRPCEngineError(err)
		}
		if r.Outcome == NotFound {
			continue // deleted since: nothing to take
		}
		if len(r.Jobs) == 0 {
			continue
		}
		a.metrics.leased(q, r.Jobs)
		if stop, err := a.pushLeased(ctx, s, out, r.Jobs, r.Traces, k); stop {
			return false, true, err
		}
		// With no slot left, the queue may still hold ready jobs: a
		// report frees a slot and wakes this loop to take them.
		free -= len(r.Jobs)
	}
	return shed, false, nil
}

// pushLeased sends jobs leased for the stream to its worker. stop: the
// stream ends, returning err (nil: cleanly), and what it did not send
// goes back.
func (a *API) pushLeased(ctx context.Context, s *stream, out assignments, jobs []*Job, traces map[string]engine.TraceContext, reserved int) (stop bool, err error) {
	if !a.hub.track(s, jobs, reserved) || ctx.Err() != nil {
		a.unsent(ctx, s, jobs)
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		return true, a.hub.ended(s)
	}
	if n, err := sendJobs(ctx, out, jobs, traces); err != nil {
		// The worker is gone: what did not leave goes back now;
		// what left is its until a new stream of it or the
		// lease's end settles it.
		a.unsent(ctx, s, jobs[n:])
		return true, err
	}
	return false, nil
}

// awaitWork sleeps until a note or a report wakes the stream, or, after a
// shed lease, for at most streamRetryPause. look is false when only jobs
// a report or submit leased for the stream woke it: they are to push,
// and nothing says the queues hold more (a Lease would find nothing).
func (a *API) awaitWork(ctx context.Context, s *stream, shed bool) (look bool, err error) {
	var pause <-chan time.Time // nil: no pause, only a wake-up
	if shed {
		pause = time.After(streamRetryPause)
	}
	select {
	case <-s.wake:
	case <-s.handoff:
		return false, nil
	case <-pause:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-a.done:
		return false, errf(connect.CodeUnavailable, "the server is shutting down; reconnect")
	}
	return true, nil
}

package jobs

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/jqpb"
)

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
			w.forget(jid)
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
	cmd := &Report{JobID: m.JobId, Worker: m.WorkerId, Success: m.Success, Result: m.Result, Error: m.ErrorMessage}
	s := a.hub.reserveNext(m.WorkerId, m.JobId)
	dctx := ctx
	if s != nil {
		cmd.Session, cmd.Next, cmd.LeaseNs = s.session, nextJobs, a.leaseNs
		// Not cancelled with the call: jobs leased by a report applied
		// but unanswered would reach nobody until their leases ran out.
		dctx = context.WithoutCancel(ctx)
	}
	r, err := a.do(dctx, JobKey(m.JobId), cmd)
	var ce *connect.Error
	// Reported, or no longer this worker's: either way its slot is free.
	freed := err == nil || errors.As(err, &ce) && (ce.Code() == connect.CodeFailedPrecondition || ce.Code() == connect.CodeNotFound)
	if r != nil && len(r.Next) > 0 {
		a.metrics.leased(r.Next[0].Queue, r.Next)
	}
	if orphans := a.hub.reported(m.WorkerId, m.JobId, freed, s, r); len(orphans) > 0 {
		a.unsent(ctx, s, orphans)
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

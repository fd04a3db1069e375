package jobs

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/surge-run/surge/internal/jqpb"
)

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

package bench

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// nullJobBuffer is how many submitted jobs the do-nothing server holds
// for its workers; beyond it a submit waits for a worker to take one, the
// only back-pressure a server without a queue can apply.
const nullJobBuffer = 1 << 16

// nullJobs is the do-nothing jobs server: the transport ceiling of
// `surge bench jobs`. SubmitJob answers a job id of the real shape at
// once and, once a worker has registered, hands the job to the worker
// streams through a channel (a job submitted before a stream opens waits
// there, as it would wait PENDING in the real server); nothing is stored,
// logged or retried. Workers get at most their
// registered concurrency of unreported jobs, as from the real server, so
// the generator's workers do the same work against both.
type nullJobs struct {
	jqpbconnect.UnimplementedJobServiceHandler
	jqpbconnect.UnimplementedWorkerServiceHandler

	jobs       chan *jqpb.JobAssignment
	registered atomic.Int64 // registered workers: with none, submits are not handed on
	seq        atomic.Uint64
	workers    sync.Map // worker id → *nullWorker
}

type nullWorker struct {
	slots chan struct{} // one token per job it may hold unreported
}

func newNullJobs() *nullJobs {
	return &nullJobs{jobs: make(chan *jqpb.JobAssignment, nullJobBuffer)}
}

// newID is a version-4 UUID string like the real server's job and worker
// ids, derived from a counter: cheaper than crypto/rand, and the ids only
// need to be distinct within the run.
func (n *nullJobs) newID() string { return uuidOf(n.seq.Add(1)) }

func (n *nullJobs) submit(ctx context.Context, req *jqpb.SubmitJobRequest) (string, error) {
	id := n.newID()
	if n.registered.Load() == 0 {
		return id, nil
	}
	a := &jqpb.JobAssignment{JobId: id, QueueName: req.QueueName, Payload: req.Payload, Priority: req.Priority, TtlSeconds: req.TtlSeconds}
	select {
	case n.jobs <- a:
		return id, nil
	case <-ctx.Done():
		return "", connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

func (n *nullJobs) SubmitJob(ctx context.Context, req *connect.Request[jqpb.SubmitJobRequest]) (*connect.Response[jqpb.SubmitJobResponse], error) {
	id, err := n.submit(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.SubmitJobResponse{JobId: id}), nil
}

func (n *nullJobs) SubmitJobs(ctx context.Context, req *connect.Request[jqpb.SubmitJobsRequest]) (*connect.Response[jqpb.SubmitJobsResponse], error) {
	ids := make([]string, len(req.Msg.Jobs))
	for i, j := range req.Msg.Jobs {
		id, err := n.submit(ctx, j)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return connect.NewResponse(&jqpb.SubmitJobsResponse{JobIds: ids}), nil
}

func (n *nullJobs) RegisterWorker(_ context.Context, req *connect.Request[jqpb.RegisterWorkerRequest]) (*connect.Response[jqpb.RegisterWorkerResponse], error) {
	id := req.Msg.WorkerId
	if id == "" {
		id = n.newID()
	}
	c := int(min(max(req.Msg.Concurrency, 1), 1000))
	w := &nullWorker{slots: make(chan struct{}, c)}
	for range c {
		w.slots <- struct{}{}
	}
	if _, again := n.workers.Swap(id, w); !again {
		n.registered.Add(1)
	}
	return connect.NewResponse(&jqpb.RegisterWorkerResponse{WorkerId: id}), nil
}

func (n *nullJobs) worker(id string) (*nullWorker, error) {
	w, ok := n.workers.Load(id)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such worker"))
	}
	return w.(*nullWorker), nil
}

func (n *nullJobs) StreamJobs(ctx context.Context, req *connect.Request[jqpb.StreamJobsRequest], stream *connect.ServerStream[jqpb.JobAssignment]) error {
	return n.streamTo(ctx, req.Msg.WorkerId, stream.Send)
}

// streamTo hands the worker a job each time it has a free slot.
func (n *nullJobs) streamTo(ctx context.Context, workerID string, send func(*jqpb.JobAssignment) error) error {
	w, err := n.worker(workerID)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.slots:
		}
		select {
		case <-ctx.Done():
			return nil
		case a := <-n.jobs:
			if err := send(a); err != nil {
				return err
			}
		}
	}
}

func (n *nullJobs) ReportResult(_ context.Context, req *connect.Request[jqpb.ReportResultRequest]) (*connect.Response[jqpb.ReportResultResponse], error) {
	w, err := n.worker(req.Msg.WorkerId)
	if err != nil {
		return nil, err
	}
	select {
	case w.slots <- struct{}{}:
	default:
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the worker holds no job"))
	}
	return connect.NewResponse(&jqpb.ReportResultResponse{}), nil
}

func (n *nullJobs) AckJob(context.Context, *connect.Request[jqpb.AckJobRequest]) (*connect.Response[jqpb.AckJobResponse], error) {
	return connect.NewResponse(&jqpb.AckJobResponse{}), nil
}

func (n *nullJobs) Heartbeat(context.Context, *connect.Request[jqpb.HeartbeatRequest]) (*connect.Response[jqpb.HeartbeatResponse], error) {
	return connect.NewResponse(&jqpb.HeartbeatResponse{}), nil
}

func (n *nullJobs) Deregister(_ context.Context, req *connect.Request[jqpb.DeregisterRequest]) (*connect.Response[jqpb.DeregisterResponse], error) {
	if _, ok := n.workers.LoadAndDelete(req.Msg.WorkerId); ok {
		n.registered.Add(-1)
	}
	return connect.NewResponse(&jqpb.DeregisterResponse{}), nil
}

// registerJobsNull mounts the do-nothing JobService and WorkerService, and
// server reflection for them, on the null server's mux, so ghz and grpcurl
// reach it as they reach `surge serve`.
func registerJobsNull(mux *http.ServeMux) {
	n := newNullJobs()
	mux.Handle(jqpbconnect.NewJobServiceHandler(n))
	mux.Handle(jqpbconnect.NewWorkerServiceHandler(n))
	r := grpcreflect.NewStaticReflector(jqpbconnect.JobServiceName, jqpbconnect.WorkerServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(r))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(r))
}

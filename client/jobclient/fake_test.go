package jobclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// fakeServer is the WorkerService as the protocol describes it, reduced to
// what a test steers: each StreamJobs call shows up on streams, and the
// test pushes assignments into it and decides how it ends.
type fakeServer struct {
	jqpbconnect.UnimplementedWorkerServiceHandler
	streams      chan *fakeStream
	acks         chan string
	reports      chan *jqpb.ReportResultRequest
	deregistered chan string

	mu         sync.Mutex
	registers  int
	heartbeats int
	lastHeld   *jqpb.HeldJobs // of the last heartbeat
}

type fakeStream struct {
	req  *jqpb.StreamJobsRequest
	send chan *jqpb.JobAssignment
	end  chan error // nil: a clean end (the server's DrainWorker)
}

func newFakeServer(t *testing.T) (*fakeServer, *Client) {
	t.Helper()
	f := &fakeServer{
		streams:      make(chan *fakeStream, 8),
		acks:         make(chan string, 64),
		reports:      make(chan *jqpb.ReportResultRequest, 64),
		deregistered: make(chan string, 8),
	}
	mux := http.NewServeMux()
	mux.Handle(jqpbconnect.NewWorkerServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return f, New(srv.URL)
}

func (f *fakeServer) RegisterWorker(_ context.Context, req *connect.Request[jqpb.RegisterWorkerRequest]) (*connect.Response[jqpb.RegisterWorkerResponse], error) {
	f.mu.Lock()
	f.registers++
	f.mu.Unlock()
	id := req.Msg.WorkerId
	if id == "" {
		id = "assigned-1"
	}
	return connect.NewResponse(&jqpb.RegisterWorkerResponse{WorkerId: id}), nil
}

func (f *fakeServer) Heartbeat(_ context.Context, req *connect.Request[jqpb.HeartbeatRequest]) (*connect.Response[jqpb.HeartbeatResponse], error) {
	f.mu.Lock()
	f.heartbeats++
	f.lastHeld = req.Msg.Held
	f.mu.Unlock()
	return connect.NewResponse(&jqpb.HeartbeatResponse{}), nil
}

func (f *fakeServer) StreamJobs(ctx context.Context, req *connect.Request[jqpb.StreamJobsRequest], ss *connect.ServerStream[jqpb.JobAssignment]) error {
	s := &fakeStream{req: req.Msg, send: make(chan *jqpb.JobAssignment, 16), end: make(chan error, 1)}
	f.streams <- s
	for {
		select {
		case a := <-s.send:
			if err := ss.Send(a); err != nil {
				return err
			}
		case err := <-s.end:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fakeServer) AckJob(_ context.Context, req *connect.Request[jqpb.AckJobRequest]) (*connect.Response[jqpb.AckJobResponse], error) {
	f.acks <- req.Msg.JobId
	return connect.NewResponse(&jqpb.AckJobResponse{}), nil
}

func (f *fakeServer) ReportResult(_ context.Context, req *connect.Request[jqpb.ReportResultRequest]) (*connect.Response[jqpb.ReportResultResponse], error) {
	f.reports <- req.Msg
	return connect.NewResponse(&jqpb.ReportResultResponse{}), nil
}

func (f *fakeServer) Deregister(_ context.Context, req *connect.Request[jqpb.DeregisterRequest]) (*connect.Response[jqpb.DeregisterResponse], error) {
	f.deregistered <- req.Msg.WorkerId
	return connect.NewResponse(&jqpb.DeregisterResponse{}), nil
}

const testWait = 10 * time.Second

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(testWait):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func none[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("unexpected %s: %v", what, v)
	case <-time.After(200 * time.Millisecond):
	}
}

// runWorker starts w.Run and returns the channel of its result.
func runWorker(ctx context.Context, w *Worker) <-chan error {
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return done
}

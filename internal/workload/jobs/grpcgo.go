package jobs

import (
	"context"
	"slices"

	"google.golang.org/grpc"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/jqpb"
)

// The jq services on grpc-go (the server's --grpc-addr): each method is
// the connect handler of the same name, through api.Unary, so the two
// transports share every line of the API's code.

// RegisterGRPC registers the three services, served by a, on s.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) {
	g := grpcJobs{a: a}
	s.RegisterService(jobServiceDesc(g), g)
	jqpb.RegisterWorkerServiceServer(s, grpcWorkers{a: a})
	jqpb.RegisterAdminServiceServer(s, grpcAdmin{a: a})
}

// jobServiceDesc is the JobService as generated, but for SubmitJob's
// handler (submitJobHandler).
func jobServiceDesc(g grpcJobs) *grpc.ServiceDesc {
	d := jqpb.JobService_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	for i := range d.Methods {
		if d.Methods[i].MethodName == "SubmitJob" {
			d.Methods[i].Handler = submitJobHandler(g)
		}
	}
	return &d
}

// submitJobHandler is the generated SubmitJob handler, but for the
// interceptor's info and handler: it makes them once, where the generated
// one made both for every call, two of a unary submit's allocations. The
// server's interceptor only reads them.
func submitJobHandler(g grpcJobs) grpc.MethodHandler {
	info := &grpc.UnaryServerInfo{Server: g, FullMethod: jqpb.JobService_SubmitJob_FullMethodName}
	call := func(ctx context.Context, req any) (any, error) {
		return g.SubmitJob(ctx, req.(*jqpb.SubmitJobRequest))
	}
	return func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(jqpb.SubmitJobRequest)
		if err := dec(in); err != nil {
			return nil, err
		}
		if icpt == nil {
			return g.SubmitJob(ctx, in)
		}
		return icpt(ctx, in, info, call)
	}
}

type grpcJobs struct {
	jqpb.UnimplementedJobServiceServer
	a *API
}

type grpcWorkers struct {
	jqpb.UnimplementedWorkerServiceServer
	a *API
}

type grpcAdmin struct {
	jqpb.UnimplementedAdminServiceServer
	a *API
}

// SubmitJob skips api.Unary: the handler sets no headers or trailers,
// and the connect request and response were pure cost (API.submitJob).
func (g grpcJobs) SubmitJob(ctx context.Context, r *jqpb.SubmitJobRequest) (*jqpb.SubmitJobResponse, error) {
	res, err := g.a.submitJob(ctx, r)
	if err != nil {
		return nil, api.GRPCError(ctx, err)
	}
	return res, nil
}

func (g grpcJobs) CancelJob(ctx context.Context, r *jqpb.CancelJobRequest) (*jqpb.CancelJobResponse, error) {
	return api.Unary(ctx, r, g.a.CancelJob)
}

func (g grpcJobs) GetJobStatus(ctx context.Context, r *jqpb.GetJobStatusRequest) (*jqpb.GetJobStatusResponse, error) {
	return api.Unary(ctx, r, g.a.GetJobStatus)
}

func (g grpcJobs) ListJobs(ctx context.Context, r *jqpb.ListJobsRequest) (*jqpb.ListJobsResponse, error) {
	return api.Unary(ctx, r, g.a.ListJobs)
}

func (g grpcJobs) GetJobLogs(ctx context.Context, r *jqpb.GetJobLogsRequest) (*jqpb.GetJobLogsResponse, error) {
	return api.Unary(ctx, r, g.a.GetJobLogs)
}

func (g grpcJobs) RetryJob(ctx context.Context, r *jqpb.RetryJobRequest) (*jqpb.RetryJobResponse, error) {
	return api.Unary(ctx, r, g.a.RetryJob)
}

func (g grpcJobs) SubmitJobs(ctx context.Context, r *jqpb.SubmitJobsRequest) (*jqpb.SubmitJobsResponse, error) {
	return api.Unary(ctx, r, g.a.SubmitJobs)
}

func (g grpcWorkers) RegisterWorker(ctx context.Context, r *jqpb.RegisterWorkerRequest) (*jqpb.RegisterWorkerResponse, error) {
	return api.Unary(ctx, r, g.a.RegisterWorker)
}

func (g grpcWorkers) Heartbeat(ctx context.Context, r *jqpb.HeartbeatRequest) (*jqpb.HeartbeatResponse, error) {
	return api.Unary(ctx, r, g.a.Heartbeat)
}

func (g grpcWorkers) ReportResult(ctx context.Context, r *jqpb.ReportResultRequest) (*jqpb.ReportResultResponse, error) {
	return api.Unary(ctx, r, g.a.ReportResult)
}

func (g grpcWorkers) Deregister(ctx context.Context, r *jqpb.DeregisterRequest) (*jqpb.DeregisterResponse, error) {
	return api.Unary(ctx, r, g.a.Deregister)
}

func (g grpcWorkers) AckJob(ctx context.Context, r *jqpb.AckJobRequest) (*jqpb.AckJobResponse, error) {
	return api.Unary(ctx, r, g.a.AckJob)
}

func (g grpcAdmin) CreateQueue(ctx context.Context, r *jqpb.CreateQueueRequest) (*jqpb.CreateQueueResponse, error) {
	return api.Unary(ctx, r, g.a.CreateQueue)
}

func (g grpcAdmin) DeleteQueue(ctx context.Context, r *jqpb.DeleteQueueRequest) (*jqpb.DeleteQueueResponse, error) {
	return api.Unary(ctx, r, g.a.DeleteQueue)
}

func (g grpcAdmin) ListQueues(ctx context.Context, r *jqpb.ListQueuesRequest) (*jqpb.ListQueuesResponse, error) {
	return api.Unary(ctx, r, g.a.ListQueues)
}

func (g grpcAdmin) GetQueueStats(ctx context.Context, r *jqpb.GetQueueStatsRequest) (*jqpb.GetQueueStatsResponse, error) {
	return api.Unary(ctx, r, g.a.GetQueueStats)
}

func (g grpcAdmin) ListWorkers(ctx context.Context, r *jqpb.ListWorkersRequest) (*jqpb.ListWorkersResponse, error) {
	return api.Unary(ctx, r, g.a.ListWorkers)
}

func (g grpcAdmin) DrainWorker(ctx context.Context, r *jqpb.DrainWorkerRequest) (*jqpb.DrainWorkerResponse, error) {
	return api.Unary(ctx, r, g.a.DrainWorker)
}

func (g grpcAdmin) ShutdownWorker(ctx context.Context, r *jqpb.ShutdownWorkerRequest) (*jqpb.ShutdownWorkerResponse, error) {
	return api.Unary(ctx, r, g.a.ShutdownWorker)
}

func (g grpcAdmin) GetSystemStatus(ctx context.Context, r *jqpb.GetSystemStatusRequest) (*jqpb.GetSystemStatusResponse, error) {
	return api.Unary(ctx, r, g.a.GetSystemStatus)
}

func (g grpcAdmin) PauseQueue(ctx context.Context, r *jqpb.PauseQueueRequest) (*jqpb.PauseQueueResponse, error) {
	return api.Unary(ctx, r, g.a.PauseQueue)
}

func (g grpcAdmin) ResumeQueue(ctx context.Context, r *jqpb.ResumeQueueRequest) (*jqpb.ResumeQueueResponse, error) {
	return api.Unary(ctx, r, g.a.ResumeQueue)
}

func (g grpcWorkers) StreamJobs(r *jqpb.StreamJobsRequest, out grpc.ServerStreamingServer[jqpb.JobAssignment]) error {
	ctx := out.Context()
	return api.GRPCError(ctx, g.a.streamJobs(ctx, r, grpcAssignments{out}))
}

// grpcAssignments is a grpc-go worker stream as the API sends on it.
type grpcAssignments struct {
	grpc.ServerStreamingServer[jqpb.JobAssignment]
}

// Send(nil) sends the headers alone, as a connect stream's does.
func (s grpcAssignments) Send(m *jqpb.JobAssignment) error {
	if m == nil {
		return s.SendHeader(nil)
	}
	return s.ServerStreamingServer.Send(m)
}

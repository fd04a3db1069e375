package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// jobsSubmitter and jobsWorkerAPI are the calls the submit and e2e phases
// make, over connect-go (h2c, to --addr) or grpc-go (to --grpc-addr);
// errors carry connect codes either way.
type jobsSubmitter interface {
	submit(ctx context.Context, req *jqpb.SubmitJobRequest) error
	submitBatch(ctx context.Context, req *jqpb.SubmitJobsRequest) error
}

type jobsWorkerAPI interface {
	register(ctx context.Context, req *jqpb.RegisterWorkerRequest) (string, error)
	// stream calls got for each job until the stream ends; the error is
	// the stream's end (nil: it ended cleanly).
	stream(ctx context.Context, workerID string, got func(*jqpb.JobAssignment)) error
	ack(ctx context.Context, req *jqpb.AckJobRequest) error
	report(ctx context.Context, req *jqpb.ReportResultRequest) error
	deregister(ctx context.Context, workerID string)
	close()
}

// connectJobs is the connect-go client of one h2c connection.
type connectJobs struct {
	hc   *http.Client
	jobs jqpbconnect.JobServiceClient
	work jqpbconnect.WorkerServiceClient
}

func newConnectJobs(baseURL string) *connectJobs {
	hc := newH2CClient()
	return &connectJobs{hc: hc, jobs: jqpbconnect.NewJobServiceClient(hc, baseURL, grpcOpts...),
		work: jqpbconnect.NewWorkerServiceClient(hc, baseURL, grpcOpts...)}
}

func (c *connectJobs) submit(ctx context.Context, req *jqpb.SubmitJobRequest) error {
	_, err := c.jobs.SubmitJob(ctx, connect.NewRequest(req))
	return err
}

func (c *connectJobs) submitBatch(ctx context.Context, req *jqpb.SubmitJobsRequest) error {
	_, err := c.jobs.SubmitJobs(ctx, connect.NewRequest(req))
	return err
}

func (c *connectJobs) register(ctx context.Context, req *jqpb.RegisterWorkerRequest) (string, error) {
	r, err := c.work.RegisterWorker(ctx, connect.NewRequest(req))
	if err != nil {
		return "", err
	}
	return r.Msg.WorkerId, nil
}

func (c *connectJobs) stream(ctx context.Context, id string, got func(*jqpb.JobAssignment)) error {
	s, err := c.work.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: id}))
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
		got(s.Msg())
	}
	return s.Err()
}

func (c *connectJobs) ack(ctx context.Context, req *jqpb.AckJobRequest) error {
	_, err := c.work.AckJob(ctx, connect.NewRequest(req))
	return err
}

func (c *connectJobs) report(ctx context.Context, req *jqpb.ReportResultRequest) error {
	_, err := c.work.ReportResult(ctx, connect.NewRequest(req))
	return err
}

func (c *connectJobs) deregister(ctx context.Context, id string) {
	_, _ = c.work.Deregister(ctx, connect.NewRequest(&jqpb.DeregisterRequest{WorkerId: id}))
}

func (c *connectJobs) close() { c.hc.CloseIdleConnections() }

// grpcJobs is the grpc-go client of one connection.
type grpcJobs struct {
	conn *grpc.ClientConn
	jobs jqpb.JobServiceClient
	work jqpb.WorkerServiceClient
}

// newGRPCJobs connects to addr (host:port) before the clock starts, as
// ghz does.
func newGRPCJobs(ctx context.Context, addr string) (*grpcJobs, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return &grpcJobs{conn: conn, jobs: jqpb.NewJobServiceClient(conn), work: jqpb.NewWorkerServiceClient(conn)}, nil
}

// grpcErr gives a grpc-go error its connect code.
func grpcErr(err error) error {
	if err == nil {
		return nil
	}
	return connect.NewError(connect.Code(status.Code(err)), err)
}

func (c *grpcJobs) submit(ctx context.Context, req *jqpb.SubmitJobRequest) error {
	_, err := c.jobs.SubmitJob(ctx, req)
	return grpcErr(err)
}

func (c *grpcJobs) submitBatch(ctx context.Context, req *jqpb.SubmitJobsRequest) error {
	_, err := c.jobs.SubmitJobs(ctx, req)
	return grpcErr(err)
}

func (c *grpcJobs) register(ctx context.Context, req *jqpb.RegisterWorkerRequest) (string, error) {
	r, err := c.work.RegisterWorker(ctx, req)
	if err != nil {
		return "", grpcErr(err)
	}
	return r.WorkerId, nil
}

func (c *grpcJobs) stream(ctx context.Context, id string, got func(*jqpb.JobAssignment)) error {
	s, err := c.work.StreamJobs(ctx, &jqpb.StreamJobsRequest{WorkerId: id})
	if err != nil {
		return grpcErr(err)
	}
	for {
		a, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return grpcErr(err)
		}
		got(a)
	}
}

func (c *grpcJobs) ack(ctx context.Context, req *jqpb.AckJobRequest) error {
	_, err := c.work.AckJob(ctx, req)
	return grpcErr(err)
}

func (c *grpcJobs) report(ctx context.Context, req *jqpb.ReportResultRequest) error {
	_, err := c.work.ReportResult(ctx, req)
	return grpcErr(err)
}

func (c *grpcJobs) deregister(ctx context.Context, id string) {
	_, _ = c.work.Deregister(ctx, &jqpb.DeregisterRequest{WorkerId: id})
}

func (c *grpcJobs) close() { c.conn.Close() }

// jobsClient is one connection's calls, both services.
type jobsClient interface {
	jobsSubmitter
	jobsWorkerAPI
}

// jobsDialer opens a connection to the server under test.
type jobsDialer func(ctx context.Context) (jobsClient, error)

// connectDialer opens an h2c connection to baseURL (by a health check, so
// that it is open before the measured window).
func connectDialer(baseURL string) jobsDialer {
	return func(ctx context.Context) (jobsClient, error) {
		c := newConnectJobs(baseURL)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/health_check", nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("open a connection: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, nil
	}
}

// grpcDialer opens a grpc-go connection to addr (host:port).
func grpcDialer(addr string) jobsDialer {
	return func(ctx context.Context) (jobsClient, error) {
		c, err := newGRPCJobs(ctx, addr)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", addr, err)
		}
		return c, nil
	}
}

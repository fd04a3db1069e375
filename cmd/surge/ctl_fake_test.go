package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// fakeJQ is a small in-memory jq server for the ctl tests: enough of the
// JobService and AdminService to answer each command with known values
// (a fixed clock, sequential ids) and the errors the real one gives. It
// records the last submit so tests can check what the flags put on the
// wire.
type fakeJQ struct {
	jqpbconnect.UnimplementedJobServiceHandler
	jqpbconnect.UnimplementedAdminServiceHandler

	mu         sync.Mutex
	now        time.Time
	queues     []*jqpb.Queue
	jobs       []*jqpb.Job
	events     map[string][]*jqpb.JobEvent
	workers    []*jqpb.Worker
	lastSubmit *jqpb.SubmitJobRequest
	keys       map[string]string
}

var fakeEpoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newFakeJQ() *fakeJQ {
	f := &fakeJQ{now: fakeEpoch, events: map[string][]*jqpb.JobEvent{}, keys: map[string]string{}}
	f.queues = []*jqpb.Queue{{Name: "default", MaxRetries: 3, CreatedAt: timestamppb.New(fakeEpoch)}}
	f.workers = []*jqpb.Worker{{
		WorkerId: "w-1", Hostname: "box1", Status: jqpb.WorkerStatus_ONLINE, Concurrency: 4,
		ActiveJobCount: 1, LastHeartbeat: timestamppb.New(fakeEpoch), Queues: []string{"default", "mail"},
	}}
	return f
}

// serveFake serves f over gRPC on cleartext HTTP/2, as surge serve does.
func serveFake(t *testing.T, f *fakeJQ) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(jqpbconnect.NewJobServiceHandler(f))
	mux.Handle(jqpbconnect.NewAdminServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// tick is the fake clock: every change happens one second after the last.
func (f *fakeJQ) tick() *timestamppb.Timestamp {
	f.now = f.now.Add(time.Second)
	return timestamppb.New(f.now)
}

func notFound(format string, args ...any) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf(format, args...))
}

func (f *fakeJQ) queue(name string) *jqpb.Queue {
	for _, q := range f.queues {
		if q.Name == name {
			return q
		}
	}
	return nil
}

func (f *fakeJQ) job(id string) *jqpb.Job {
	for _, j := range f.jobs {
		if j.JobId == id {
			return j
		}
	}
	return nil
}

func (f *fakeJQ) move(j *jqpb.Job, to jqpb.JobStatus, reason string) {
	evs := f.events[j.JobId]
	f.events[j.JobId] = append(evs, &jqpb.JobEvent{
		Id: int64(len(evs) + 1), JobId: j.JobId, FromStatus: j.Status, ToStatus: to,
		WorkerId: j.WorkerId, Reason: reason, OccurredAt: f.tick(),
	})
	j.Status = to
}

func (f *fakeJQ) SubmitJob(_ context.Context, req *connect.Request[jqpb.SubmitJobRequest]) (*connect.Response[jqpb.SubmitJobResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := req.Msg
	f.lastSubmit = proto.Clone(m).(*jqpb.SubmitJobRequest)
	if m.Priority < 0 || m.Priority > 9 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("jobs: priority %d is not in 0..9", m.Priority))
	}
	q := f.queue(m.QueueName)
	if q == nil {
		return nil, notFound("jobs: no queue %q", m.QueueName)
	}
	if id, ok := f.keys[m.IdempotencyKey]; ok && m.IdempotencyKey != "" {
		return connect.NewResponse(&jqpb.SubmitJobResponse{JobId: id}), nil
	}
	j := &jqpb.Job{
		JobId: "job-" + strconv.Itoa(len(f.jobs)+1), QueueName: q.Name, Payload: m.Payload, Priority: m.Priority,
		MaxRetries: cmp(m.MaxRetries, q.MaxRetries), CreatedAt: f.tick(), NotBefore: m.NotBefore,
	}
	f.jobs = append(f.jobs, j)
	f.move(j, jqpb.JobStatus_PENDING, "submitted")
	if m.IdempotencyKey != "" {
		f.keys[m.IdempotencyKey] = j.JobId
	}
	return connect.NewResponse(&jqpb.SubmitJobResponse{JobId: j.JobId}), nil
}

func cmp(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// finish runs a job to an end as a worker would, for the tests' fixtures.
func (f *fakeJQ) finish(id string, success bool, result []byte, errMsg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.job(id)
	j.WorkerId = "w-1"
	f.move(j, jqpb.JobStatus_ASSIGNED, "leased")
	f.move(j, jqpb.JobStatus_RUNNING, "acknowledged")
	j.StartedAt = timestamppb.New(f.now)
	j.CompletedAt = timestamppb.New(f.now.Add(1234567 * time.Microsecond))
	j.Result, j.ErrorMessage = result, errMsg
	if success {
		f.move(j, jqpb.JobStatus_DONE, "succeeded")
	} else {
		f.move(j, jqpb.JobStatus_FAILED, errMsg)
		f.move(j, jqpb.JobStatus_DEAD_LETTERED, "retries exhausted")
	}
}

func (f *fakeJQ) GetJobStatus(_ context.Context, req *connect.Request[jqpb.GetJobStatusRequest]) (*connect.Response[jqpb.GetJobStatusResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.job(req.Msg.JobId)
	if j == nil {
		return nil, notFound("jobs: no job %q", req.Msg.JobId)
	}
	return connect.NewResponse(&jqpb.GetJobStatusResponse{Job: proto.Clone(j).(*jqpb.Job)}), nil
}

func (f *fakeJQ) GetJobLogs(_ context.Context, req *connect.Request[jqpb.GetJobLogsRequest]) (*connect.Response[jqpb.GetJobLogsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.job(req.Msg.JobId) == nil {
		return nil, notFound("jobs: no job %q", req.Msg.JobId)
	}
	return connect.NewResponse(&jqpb.GetJobLogsResponse{Events: f.events[req.Msg.JobId]}), nil
}

// ListJobs pages by position; the token is the index of the next job.
func (f *fakeJQ) ListJobs(_ context.Context, req *connect.Request[jqpb.ListJobsRequest]) (*connect.Response[jqpb.ListJobsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := req.Msg
	if f.queue(m.QueueName) == nil {
		return nil, notFound("jobs: no queue %q", m.QueueName)
	}
	limit := int(cmp(m.Limit, 20))
	start := 0
	if m.PageToken != "" {
		var err error
		if start, err = strconv.Atoi(m.PageToken); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("jobs: bad page token"))
		}
	}
	res := &jqpb.ListJobsResponse{}
	for i := start; i < len(f.jobs); i++ {
		j := f.jobs[i]
		if j.QueueName != m.QueueName || (m.Status != 0 && j.Status != m.Status) {
			continue
		}
		if len(res.Jobs) == limit {
			res.NextPageToken = strconv.Itoa(i)
			break
		}
		res.Jobs = append(res.Jobs, j)
	}
	return connect.NewResponse(res), nil
}

func (f *fakeJQ) CancelJob(_ context.Context, req *connect.Request[jqpb.CancelJobRequest]) (*connect.Response[jqpb.CancelJobResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.job(req.Msg.JobId)
	if j == nil {
		return nil, notFound("jobs: no job %q", req.Msg.JobId)
	}
	if j.Status != jqpb.JobStatus_PENDING {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("jobs: job %q is %v", j.JobId, j.Status))
	}
	f.move(j, jqpb.JobStatus_DEAD_LETTERED, "CANCELLED")
	return connect.NewResponse(&jqpb.CancelJobResponse{}), nil
}

func (f *fakeJQ) RetryJob(_ context.Context, req *connect.Request[jqpb.RetryJobRequest]) (*connect.Response[jqpb.RetryJobResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.job(req.Msg.JobId)
	if j == nil {
		return nil, notFound("jobs: no job %q", req.Msg.JobId)
	}
	if j.Status != jqpb.JobStatus_FAILED && j.Status != jqpb.JobStatus_DEAD_LETTERED {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("jobs: job %q is %v", j.JobId, j.Status))
	}
	f.move(j, jqpb.JobStatus_PENDING, "manual retry")
	return connect.NewResponse(&jqpb.RetryJobResponse{JobId: j.JobId}), nil
}

func (f *fakeJQ) CreateQueue(_ context.Context, req *connect.Request[jqpb.CreateQueueRequest]) (*connect.Response[jqpb.CreateQueueResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := req.Msg
	if f.queue(m.Name) != nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("jobs: queue %q exists", m.Name))
	}
	q := &jqpb.Queue{Name: m.Name, MaxRetries: cmp(m.MaxRetries, 3), TtlSeconds: m.TtlSeconds, CreatedAt: f.tick()}
	f.queues = append(f.queues, q)
	return connect.NewResponse(&jqpb.CreateQueueResponse{Queue: q}), nil
}

func (f *fakeJQ) DeleteQueue(_ context.Context, req *connect.Request[jqpb.DeleteQueueRequest]) (*connect.Response[jqpb.DeleteQueueResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := req.Msg
	if f.queue(m.Name) == nil {
		return nil, notFound("jobs: no queue %q", m.Name)
	}
	held := slices.ContainsFunc(f.jobs, func(j *jqpb.Job) bool { return j.QueueName == m.Name })
	if held && !m.Force {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("jobs: queue %q holds jobs (delete with force)", m.Name))
	}
	f.queues = slices.DeleteFunc(f.queues, func(q *jqpb.Queue) bool { return q.Name == m.Name })
	f.jobs = slices.DeleteFunc(f.jobs, func(j *jqpb.Job) bool { return j.QueueName == m.Name })
	return connect.NewResponse(&jqpb.DeleteQueueResponse{}), nil
}

func (f *fakeJQ) ListQueues(context.Context, *connect.Request[jqpb.ListQueuesRequest]) (*connect.Response[jqpb.ListQueuesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&jqpb.ListQueuesResponse{Queues: f.queues}), nil
}

func (f *fakeJQ) stats(name string) *jqpb.QueueStats {
	s := &jqpb.QueueStats{QueueName: name}
	for _, j := range f.jobs {
		if j.QueueName != name {
			continue
		}
		switch j.Status {
		case jqpb.JobStatus_PENDING:
			s.PendingCount++
		case jqpb.JobStatus_ASSIGNED, jqpb.JobStatus_RUNNING:
			s.RunningCount++
		case jqpb.JobStatus_FAILED:
			s.FailedCount++
		case jqpb.JobStatus_DONE:
			s.DoneCount++
			s.TotalProcessed++
		case jqpb.JobStatus_DEAD_LETTERED:
			s.DeadLetterCount++
			s.TotalProcessed++
		}
	}
	if s.TotalProcessed > 0 {
		s.AvgDurationMs = 265.4321
		s.ErrorRate = float64(s.DeadLetterCount) / float64(s.TotalProcessed)
	}
	return s
}

func (f *fakeJQ) GetQueueStats(_ context.Context, req *connect.Request[jqpb.GetQueueStatsRequest]) (*connect.Response[jqpb.GetQueueStatsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queue(req.Msg.Name) == nil {
		return nil, notFound("jobs: no queue %q", req.Msg.Name)
	}
	return connect.NewResponse(&jqpb.GetQueueStatsResponse{Stats: f.stats(req.Msg.Name)}), nil
}

func (f *fakeJQ) ListWorkers(context.Context, *connect.Request[jqpb.ListWorkersRequest]) (*connect.Response[jqpb.ListWorkersResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&jqpb.ListWorkersResponse{Workers: f.workers}), nil
}

func (f *fakeJQ) worker(id string) *jqpb.Worker {
	for _, w := range f.workers {
		if w.WorkerId == id {
			return w
		}
	}
	return nil
}

func (f *fakeJQ) DrainWorker(_ context.Context, req *connect.Request[jqpb.DrainWorkerRequest]) (*connect.Response[jqpb.DrainWorkerResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.worker(req.Msg.WorkerId)
	if w == nil {
		return nil, notFound("jobs: no worker %q", req.Msg.WorkerId)
	}
	w.Status = jqpb.WorkerStatus_DRAINING
	return connect.NewResponse(&jqpb.DrainWorkerResponse{}), nil
}

func (f *fakeJQ) ShutdownWorker(_ context.Context, req *connect.Request[jqpb.ShutdownWorkerRequest]) (*connect.Response[jqpb.ShutdownWorkerResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.worker(req.Msg.WorkerId)
	if w == nil {
		return nil, notFound("jobs: no worker %q", req.Msg.WorkerId)
	}
	w.Status = jqpb.WorkerStatus_OFFLINE
	return connect.NewResponse(&jqpb.ShutdownWorkerResponse{}), nil
}

func (f *fakeJQ) GetSystemStatus(context.Context, *connect.Request[jqpb.GetSystemStatusRequest]) (*connect.Response[jqpb.GetSystemStatusResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &jqpb.GetSystemStatusResponse{
		Healthy: true, ActiveWorkers: 1,
		Components: []*jqpb.ComponentStatus{{Name: "log", Healthy: true, Message: "ok"}},
	}
	for _, q := range f.queues {
		res.QueueStats = append(res.QueueStats, f.stats(q.Name))
	}
	return connect.NewResponse(res), nil
}

func (f *fakeJQ) setPaused(name string, paused bool) (*jqpb.Queue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue(name)
	if q == nil {
		return nil, notFound("jobs: no queue %q", name)
	}
	q.Paused = paused
	return q, nil
}

func (f *fakeJQ) PauseQueue(_ context.Context, req *connect.Request[jqpb.PauseQueueRequest]) (*connect.Response[jqpb.PauseQueueResponse], error) {
	q, err := f.setPaused(req.Msg.Name, true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.PauseQueueResponse{Queue: q}), nil
}

func (f *fakeJQ) ResumeQueue(_ context.Context, req *connect.Request[jqpb.ResumeQueueRequest]) (*connect.Response[jqpb.ResumeQueueResponse], error) {
	q, err := f.setPaused(req.Msg.Name, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.ResumeQueueResponse{Queue: q}), nil
}

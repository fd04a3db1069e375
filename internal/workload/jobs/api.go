package jobs

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// Defaults of the API.
const (
	// DefaultLease is how long a pushed job stays leased to its worker
	// without a heartbeat: jq's workers beat every 5 s and are given up
	// after 30 s of silence.
	DefaultLease = 30 * time.Second
	// DefaultRetention is how long a finished job and its log are kept.
	DefaultRetention = 24 * time.Hour
	// MaxTTLSeconds bounds ttl_seconds (a year): a larger one is a typo.
	MaxTTLSeconds = 366 * 24 * 3600
	// MaxMessageBytes bounds one request message of the three services,
	// as grpc-go's default receive limit bounds jq's server: a jq client
	// sends no more.
	MaxMessageBytes = 4 << 20
	// MaxSubmitBatchBytes bounds the sum of a SubmitJobs batch's payloads:
	// 1,000 jobs of 1 MiB each would make one log entry of 1 GB, past
	// cmdlog.MaxEntryBytes. With it the largest batch's command stays
	// under 5 MiB.
	MaxSubmitBatchBytes = 4 << 20
)

// API serves jq's JobService, WorkerService and AdminService
// (docs/API.md) over an engine that runs Workload. It
// implements the three generated handler interfaces.
type API struct {
	eng         *engine.Engine
	hub         *Hub
	metrics     *jobsMetrics
	parts       int
	leaseNs     int64
	retentionNs int64
	maxHeld     int64 // Submit.MaxHeldBytes
	done        chan struct{}
	stopOnce    sync.Once
	// healthy says whether the node serves (GetSystemStatus).
	healthy func() bool
	// Job ids are drawn from per-goroutine ChaCha8 sources seeded from
	// crypto/rand: unique with overwhelming probability, without a
	// getrandom call for every one of the partitions' worth of draws.
	rngs sync.Pool
	// opsTurns holds a turn per operator queue list being built or
	// written (RegisterOps).
	opsTurns *api.Turns
}

var (
	_ jqpbconnect.JobServiceHandler    = (*API)(nil)
	_ jqpbconnect.WorkerServiceHandler = (*API)(nil)
	_ jqpbconnect.AdminServiceHandler  = (*API)(nil)
)

// NewAPI returns the jobs API over eng, whose notes for this workload
// must be passed to hub.Notify.
func NewAPI(eng *engine.Engine, hub *Hub) *API {
	a := &API{eng: eng, hub: hub, metrics: newJobsMetrics(), parts: eng.Partitions(), leaseNs: int64(DefaultLease), retentionNs: int64(DefaultRetention),
		maxHeld: DefaultMaxHeldBytes, done: make(chan struct{}), healthy: func() bool { return !eng.Failed() },
		opsTurns: api.NewLargeAnswerTurns()}
	a.rngs.New = func() any {
		var seed [32]byte
		_, _ = crand.Read(seed[:]) // never fails (Go 1.24+)
		return rand.NewChaCha8(seed)
	}
	hub.lease = time.Duration(a.leaseNs)
	return a
}

// SetLease sets how long a pushed job stays leased without a heartbeat.
func (a *API) SetLease(d time.Duration) *API {
	if d > 0 {
		a.leaseNs = int64(d)
		a.hub.mu.Lock()
		a.hub.lease = d
		a.hub.mu.Unlock()
	}
	return a
}

// SetRetention sets how long jobs submitted from now on are kept once
// finished. Each Submit logs it, so replay purges what the live run did.
func (a *API) SetRetention(d time.Duration) *API {
	if d > 0 {
		a.retentionNs = int64(d)
	}
	return a
}

// SetPayloadMemory sets the bytes of payloads a partition's unfinished
// jobs may hold (DefaultMaxHeldBytes; 0 or less keeps it): a submit past
// it is refused RESOURCE_EXHAUSTED.
func (a *API) SetPayloadMemory(n int64) *API {
	if n > 0 {
		a.maxHeld = n
	}
	return a
}

// SetHealth replaces the health check GetSystemStatus reports.
func (a *API) SetHealth(f func() bool) *API {
	a.healthy = f
	return a
}

// Shutdown ends every worker stream with UNAVAILABLE, so workers
// reconnect elsewhere (or to this node when it is back) and a graceful
// shutdown does not wait for them.
func (a *API) Shutdown() { a.stopOnce.Do(func() { close(a.done) }) }

// Handlers returns the three services' paths and handlers, built with
// opts, for the server's mux.
func (a *API) Handlers(opts ...connect.HandlerOption) []Service {
	jp, jh := jqpbconnect.NewJobServiceHandler(a, opts...)
	wp, wh := jqpbconnect.NewWorkerServiceHandler(a, opts...)
	ap, ah := jqpbconnect.NewAdminServiceHandler(a, opts...)
	return []Service{
		{Name: jqpbconnect.JobServiceName, Path: jp, Handler: jh},
		{Name: jqpbconnect.WorkerServiceName, Path: wp, Handler: wh},
		{Name: jqpbconnect.AdminServiceName, Path: ap, Handler: ah},
	}
}

// StreamPath is the one long-lived call: the server must not apply its
// request timeouts to it.
const StreamPath = "/" + jqpbconnect.WorkerServiceName + "/StreamJobs"

// Service is one gRPC service for the server's mux.
type Service struct {
	Name, Path string
	Handler    http.Handler
}

// --- errors ---

func errf(code connect.Code, format string, a ...any) *connect.Error {
	return connect.NewError(code, fmt.Errorf(format, a...))
}

// outcomeErr maps a refused command to its gRPC code.
func outcomeErr(r *Result) error {
	code := connect.CodeInternal
	switch r.Outcome {
	case OK, Created, Same:
		return nil
	case NotFound:
		code = connect.CodeNotFound
	case Invalid:
		code = connect.CodeInvalidArgument
	case Conflict:
		code = connect.CodeFailedPrecondition
	case Exhausted:
		if r.Later {
			// Clients retry a full queue at once and in a loop unless told
			// when: the same refusal again, and more load meanwhile.
			return api.GRPCRetryError(connect.CodeResourceExhausted, r.Msg+"; retry after the RetryInfo delay", fullRetryDelay)
		}
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, errors.New(r.Msg))
}

// fullRetryDelay is the pause a refusal for a full queue, or the
// partition's payload bytes, asks for (RetryInfo, Retry-After): the
// server cannot tell when workers free room, and a second is what its
// other refusals ask for at least.
const fullRetryDelay = api.MinRetryDelay

// do applies cmd at key and returns its result, or the call's error.
func (a *API) do(ctx context.Context, key string, cmd engine.Command) (*Result, error) {
	r, err := engine.Do[*Result](ctx, a.eng, a.eng.PartitionOf(key), WorkloadID, cmd)
	if err != nil {
		return nil, api.GRPCEngineError(err)
	}
	return r, outcomeErr(r)
}

// query asks q at key's partition; the answer is an R.
func query[R any](ctx context.Context, a *API, key string, q any) (R, error) {
	v, err := engine.Query[R](ctx, a.eng, a.eng.PartitionOf(key), WorkloadID, q)
	if err != nil {
		return v, api.GRPCEngineError(err)
	}
	return v, nil
}

// all runs f for every partition at once and returns the first error.
func (a *API) all(f func(p int) error) error {
	errs := make([]error, a.parts)
	var wg sync.WaitGroup
	for p := range a.parts {
		wg.Go(func() { errs[p] = f(p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// --- conversions ---

func ts(ns int64) *timestamppb.Timestamp {
	if ns == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, ns))
}

func jobPB(j *Job) *jqpb.Job {
	return &jqpb.Job{JobId: j.ID, QueueName: j.Queue, Payload: j.Payload, Priority: j.Priority, Status: jqpb.JobStatus(j.Status),
		MaxRetries: j.MaxRetries, RetryCount: j.RetryCount, CreatedAt: ts(j.CreatedAt), StartedAt: ts(j.StartedAt),
		CompletedAt: ts(j.CompletedAt), WorkerId: j.Worker, Result: j.Result, NotBefore: ts(j.NotBefore), ErrorMessage: j.Error}
}

func queuePB(q *Queue) *jqpb.Queue {
	return &jqpb.Queue{Name: q.Name, MaxRetries: q.MaxRetries, TtlSeconds: int32(q.TTLNs / 1e9), CreatedAt: ts(q.CreatedAt), Paused: q.Paused}
}

func statsPB(s *Stats) *jqpb.QueueStats {
	return &jqpb.QueueStats{QueueName: s.Queue, PendingCount: s.Pending, RunningCount: s.Assigned + s.Running, FailedCount: s.Failed,
		DoneCount: s.Done, DeadLetterCount: s.DeadLettered, TotalProcessed: s.Processed, AvgDurationMs: s.AvgDurationMs, ErrorRate: s.ErrorRate}
}

// --- checks done before anything is logged ---

// The rule for each field a client names, the same for every call and
// every transport (gRPC, gRPC-Web, Connect): see api.CheckName and its
// siblings. Each returns INVALID_ARGUMENT naming the field.

// checkQueueName: a queue's name.
func checkQueueName(field, s string) error { return invalid(field, api.CheckName(s, MaxNameLen)) }

// checkWorkerID: a worker's id, a name too (no '/', no "..").
func checkWorkerID(s string) error { return invalid("worker_id", api.CheckName(s, MaxIDLen)) }

// checkJobID: a job's id. Surge draws UUIDs, but a job id is only looked
// up, so any printable id up to MaxIDLen is a well-formed one that names
// no job (NOT_FOUND), as before.
func checkJobID(s string) error { return invalid("job_id", api.CheckID(s, 1, MaxIDLen)) }

// checkIdempotencyKey: empty is no key.
func checkIdempotencyKey(s string) error {
	return invalid("idempotency_key", api.CheckID(s, 0, MaxKeyLen))
}

// checkHostname: a worker's hostname, as it reports it (empty allowed).
func checkHostname(s string) error { return invalid("hostname", api.CheckID(s, 0, MaxNameLen)) }

// checkErrorMessage: a failed job's message, as a worker reports it (the
// tail of a process's stderr, say): any UTF-8 but NUL, as jq kept it.
func checkErrorMessage(s string) error {
	return invalid("error_message", api.CheckMessage(s, MaxErrorLen))
}

func invalid(field, problem string) error {
	if problem == "" {
		return nil
	}
	return errf(connect.CodeInvalidArgument, "%s %s", field, problem)
}

func checkTTL(ttl int32) error {
	if ttl < 0 || ttl > MaxTTLSeconds {
		return errf(connect.CodeInvalidArgument, "ttl_seconds must be 0 (none) to %d, got %d", MaxTTLSeconds, ttl)
	}
	return nil
}

// submitOf checks a SubmitJobRequest and turns it into a Submit (without
// its job id).
func (a *API) submitOf(r *jqpb.SubmitJobRequest) (Submit, error) {
	if err := checkQueueName("queue_name", r.QueueName); err != nil {
		return Submit{}, err
	}
	switch {
	case r.Priority < 0 || r.Priority > MaxPriority:
		return Submit{}, errf(connect.CodeInvalidArgument, "priority must be 0 to %d (9 highest), got %d", MaxPriority, r.Priority)
	case r.MaxRetries < 0 || r.MaxRetries > MaxMaxRetries:
		return Submit{}, errf(connect.CodeInvalidArgument, "max_retries must be 0 (the queue's) to %d, got %d", MaxMaxRetries, r.MaxRetries)
	case len(r.Payload) > MaxPayloadBytes:
		return Submit{}, errf(connect.CodeResourceExhausted, "payload of %d bytes is over the limit of %d", len(r.Payload), MaxPayloadBytes)
	}
	if err := checkIdempotencyKey(r.IdempotencyKey); err != nil {
		return Submit{}, err
	}
	if err := checkTTL(r.TtlSeconds); err != nil {
		return Submit{}, err
	}
	s := Submit{Queue: r.QueueName, Payload: r.Payload, Priority: r.Priority, MaxRetries: r.MaxRetries,
		TTLNs: int64(r.TtlSeconds) * 1e9, IdempotencyKey: r.IdempotencyKey, RetentionNs: a.retentionNs}
	if r.NotBefore != nil {
		if err := r.NotBefore.CheckValid(); err != nil {
			return Submit{}, errf(connect.CodeInvalidArgument, "not_before: %v", err)
		}
		t := r.NotBefore.AsTime()
		if t.Year() > 2200 || t.Year() < 1970 {
			return Submit{}, errf(connect.CodeInvalidArgument, "not_before %s is not between 1970 and 2200", t.Format(time.RFC3339))
		}
		s.NotBeforeNs = t.UnixNano()
	}
	return s, nil
}

func (a *API) newJobID(queue string) (string, error) {
	var id [ids.Len]byte
	if err := a.putJobID(&id, queue); err != nil {
		return "", err
	}
	return string(id[:]), nil
}

func (a *API) putJobID(dst *[ids.Len]byte, queue string) error {
	rng := a.rngs.Get().(*rand.ChaCha8)
	defer a.rngs.Put(rng)
	if err := PutJobID(dst, queue, a.parts, rng); err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return nil
}

// --- JobService ---

func (a *API) SubmitJob(ctx context.Context, req *connect.Request[jqpb.SubmitJobRequest]) (*connect.Response[jqpb.SubmitJobResponse], error) {
	res, err := a.submitJob(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// submitJob is SubmitJob without connect's request and response, which
// the grpc-go edge calls directly: the jobs benchmark's unary run is
// nothing but this call, and connect's wrappers (and the header maps
// api.Unary makes them allocate) were a tenth of its allocations.
func (a *API) submitJob(ctx context.Context, msg *jqpb.SubmitJobRequest) (*jqpb.SubmitJobResponse, error) {
	c := new(submitCall)
	var err error
	if c.cmd, err = a.submitOf(msg); err != nil {
		return nil, err
	}
	var id [ids.Len]byte
	if err = a.putJobID(&id, c.cmd.Queue); err != nil {
		return nil, err
	}
	// A string of its own, not one pointing into the call: the machine
	// applies this very command (Machine.Canonical) and a live job keeps
	// its id, which would keep the whole call.
	c.cmd.JobID = string(id[:])
	c.cmd.MaxHeldBytes = a.maxHeld
	r, err := a.submitOne(ctx, &c.cmd)
	if err != nil {
		return nil, err
	}
	// Created, or Same for a repeated idempotency key: the job it made.
	c.res.JobId = r.Jobs[0].ID
	return &c.res, nil
}

// submitCall is a unary submit's command and its reply in one
// allocation: on every call the command goes to the engine and the reply
// to the transport, so both were on the heap, one allocation each.
type submitCall struct {
	cmd Submit
	res jqpb.SubmitJobResponse
}

func (a *API) SubmitJobs(ctx context.Context, req *connect.Request[jqpb.SubmitJobsRequest]) (*connect.Response[jqpb.SubmitJobsResponse], error) {
	b, err := a.submitBatchOf(req.Msg.Jobs)
	if err != nil {
		return nil, err
	}
	r, err := a.submitMany(ctx, b)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(r.Each))
	for i, e := range r.Each {
		ids[i] = e.Jobs[0].ID
	}
	return connect.NewResponse(&jqpb.SubmitJobsResponse{JobIds: ids}), nil
}

// submitBatchOf checks a SubmitJobs batch and turns it into its command,
// job ids drawn.
func (a *API) submitBatchOf(reqs []*jqpb.SubmitJobRequest) (*SubmitBatch, error) {
	if len(reqs) == 0 || len(reqs) > MaxSubmitBatch {
		return nil, errf(connect.CodeInvalidArgument, "jobs must hold 1 to %d jobs, got %d", MaxSubmitBatch, len(reqs))
	}
	total := 0
	for _, r := range reqs {
		total += len(r.GetPayload())
	}
	if total > MaxSubmitBatchBytes {
		return nil, errf(connect.CodeResourceExhausted, "the batch's payloads add up to %d bytes, over the limit of %d for one SubmitJobs (nothing was submitted); split it into smaller batches",
			total, MaxSubmitBatchBytes)
	}
	b := &SubmitBatch{Jobs: make([]Submit, len(reqs))}
	for i, r := range reqs {
		s, err := a.submitOf(r)
		if err != nil {
			var ce *connect.Error
			errors.As(err, &ce)
			return nil, errf(ce.Code(), "jobs[%d]: %s (nothing was submitted)", i, ce.Message())
		}
		if s.Queue != reqs[0].QueueName {
			return nil, errf(connect.CodeInvalidArgument, "jobs[%d] names queue %s, jobs[0] %s: one SubmitJobs call submits to one queue (nothing was submitted)",
				i, api.Quote(s.Queue), api.Quote(reqs[0].QueueName))
		}
		if s.JobID, err = a.newJobID(s.Queue); err != nil {
			return nil, err
		}
		b.Jobs[i] = s
	}
	b.MaxHeldBytes = a.maxHeld
	return b, nil
}

func (a *API) CancelJob(ctx context.Context, req *connect.Request[jqpb.CancelJobRequest]) (*connect.Response[jqpb.CancelJobResponse], error) {
	if err := checkJobID(req.Msg.JobId); err != nil {
		return nil, err
	}
	if _, err := a.do(ctx, JobKey(req.Msg.JobId), &Cancel{JobID: req.Msg.JobId}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.CancelJobResponse{}), nil
}

func (a *API) RetryJob(ctx context.Context, req *connect.Request[jqpb.RetryJobRequest]) (*connect.Response[jqpb.RetryJobResponse], error) {
	if err := checkJobID(req.Msg.JobId); err != nil {
		return nil, err
	}
	if _, err := a.do(ctx, JobKey(req.Msg.JobId), &Retry{JobID: req.Msg.JobId}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.RetryJobResponse{JobId: req.Msg.JobId}), nil
}

func (a *API) getJob(ctx context.Context, id string) (*Job, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	j, err := query[*Job](ctx, a, JobKey(id), GetJob{ID: id})
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, errf(connect.CodeNotFound, "no job %q (finished jobs are purged after their retention)", id)
	}
	return j, nil
}

func (a *API) GetJobStatus(ctx context.Context, req *connect.Request[jqpb.GetJobStatusRequest]) (*connect.Response[jqpb.GetJobStatusResponse], error) {
	j, err := a.getJob(ctx, req.Msg.JobId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.GetJobStatusResponse{Job: jobPB(j)}), nil
}

func (a *API) GetJobLogs(ctx context.Context, req *connect.Request[jqpb.GetJobLogsRequest]) (*connect.Response[jqpb.GetJobLogsResponse], error) {
	id := req.Msg.JobId
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	evs, err := query[[]JobEvent](ctx, a, JobKey(id), GetJobLogs{ID: id})
	if err != nil {
		return nil, err
	}
	if evs == nil {
		return nil, errf(connect.CodeNotFound, "no job %q (finished jobs are purged after their retention)", id)
	}
	out := make([]*jqpb.JobEvent, len(evs))
	for i, e := range evs {
		out[i] = &jqpb.JobEvent{Id: e.ID, JobId: id, FromStatus: jqpb.JobStatus(e.From), ToStatus: jqpb.JobStatus(e.To),
			WorkerId: e.Worker, Reason: e.Reason, OccurredAt: ts(e.At)}
	}
	return connect.NewResponse(&jqpb.GetJobLogsResponse{Events: out}), nil
}

func (a *API) ListJobs(ctx context.Context, req *connect.Request[jqpb.ListJobsRequest]) (*connect.Response[jqpb.ListJobsResponse], error) {
	m := req.Msg
	if err := checkQueueName("queue_name", m.QueueName); err != nil {
		return nil, err
	}
	if m.Limit < 0 || m.Limit > 100 {
		return nil, errf(connect.CodeInvalidArgument, "limit must be 0 (20) to 100, got %d", m.Limit)
	}
	if m.Status < 0 || m.Status >= jqpb.JobStatus(numStatuses) {
		return nil, errf(connect.CodeInvalidArgument, "status %d is not a JobStatus", m.Status)
	}
	p, err := query[*JobPage](ctx, a, QueueKey(m.QueueName), ListJobs{Queue: m.QueueName, Status: Status(m.Status), Limit: int(m.Limit), PageToken: m.PageToken})
	if err != nil {
		return nil, err
	}
	if !p.Found {
		if m.PageToken != "" {
			return nil, errf(connect.CodeInvalidArgument, "%s", p.Msg)
		}
		return nil, errf(connect.CodeNotFound, "%s", p.Msg)
	}
	out := make([]*jqpb.Job, len(p.Jobs))
	for i, j := range p.Jobs {
		out[i] = jobPB(j)
	}
	return connect.NewResponse(&jqpb.ListJobsResponse{Jobs: out, NextPageToken: p.NextPageToken}), nil
}

// --- AdminService: queues ---

func (a *API) CreateQueue(ctx context.Context, req *connect.Request[jqpb.CreateQueueRequest]) (*connect.Response[jqpb.CreateQueueResponse], error) {
	m := req.Msg
	if err := checkQueueName("name", m.Name); err != nil {
		return nil, err
	}
	if m.MaxRetries < 0 || m.MaxRetries > MaxMaxRetries {
		return nil, errf(connect.CodeInvalidArgument, "max_retries must be 0 (default %d) to %d, got %d", DefaultMaxRetries, MaxMaxRetries, m.MaxRetries)
	}
	if err := checkTTL(m.TtlSeconds); err != nil {
		return nil, err
	}
	r, err := a.do(ctx, QueueKey(m.Name), &CreateQueue{Name: m.Name, MaxRetries: m.MaxRetries, TTLNs: int64(m.TtlSeconds) * 1e9})
	if r != nil && r.Outcome == Conflict {
		// Creating a queue again with its settings is a no-op; with others
		// it is gRPC's ALREADY_EXISTS.
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New(r.Msg))
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.CreateQueueResponse{Queue: queuePB(r.Queue)}), nil
}

func (a *API) DeleteQueue(ctx context.Context, req *connect.Request[jqpb.DeleteQueueRequest]) (*connect.Response[jqpb.DeleteQueueResponse], error) {
	if err := checkQueueName("name", req.Msg.Name); err != nil {
		return nil, err
	}
	if _, err := a.do(ctx, QueueKey(req.Msg.Name), &DeleteQueue{Name: req.Msg.Name, Force: req.Msg.Force}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.DeleteQueueResponse{}), nil
}

func (a *API) pause(ctx context.Context, name string, pause bool) (*jqpb.Queue, error) {
	if err := checkQueueName("name", name); err != nil {
		return nil, err
	}
	var cmd engine.Command = &ResumeQueue{Name: name}
	if pause {
		cmd = &PauseQueue{Name: name}
	}
	r, err := a.do(ctx, QueueKey(name), cmd)
	if err != nil {
		return nil, err
	}
	return queuePB(r.Queue), nil
}

func (a *API) PauseQueue(ctx context.Context, req *connect.Request[jqpb.PauseQueueRequest]) (*connect.Response[jqpb.PauseQueueResponse], error) {
	q, err := a.pause(ctx, req.Msg.Name, true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.PauseQueueResponse{Queue: q}), nil
}

func (a *API) ResumeQueue(ctx context.Context, req *connect.Request[jqpb.ResumeQueueRequest]) (*connect.Response[jqpb.ResumeQueueResponse], error) {
	q, err := a.pause(ctx, req.Msg.Name, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&jqpb.ResumeQueueResponse{Queue: q}), nil
}

// queues lists every partition's queues, by name.
func (a *API) queues(ctx context.Context) ([]*Queue, error) {
	per, err := engine.QueryAll[[]*Queue](ctx, a.eng, WorkloadID, ListQueues{})
	if err != nil {
		return nil, api.GRPCEngineError(err)
	}
	var out []*Queue
	for _, qs := range per {
		out = append(out, qs...)
	}
	slices.SortFunc(out, func(x, y *Queue) int {
		switch {
		case x.Name < y.Name:
			return -1
		case x.Name > y.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

func (a *API) ListQueues(ctx context.Context, _ *connect.Request[jqpb.ListQueuesRequest]) (*connect.Response[jqpb.ListQueuesResponse], error) {
	qs, err := a.queues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*jqpb.Queue, len(qs))
	for i, q := range qs {
		out[i] = queuePB(q)
	}
	return connect.NewResponse(&jqpb.ListQueuesResponse{Queues: out}), nil
}

func (a *API) GetQueueStats(ctx context.Context, req *connect.Request[jqpb.GetQueueStatsRequest]) (*connect.Response[jqpb.GetQueueStatsResponse], error) {
	if err := checkQueueName("name", req.Msg.Name); err != nil {
		return nil, err
	}
	s, err := query[*Stats](ctx, a, QueueKey(req.Msg.Name), GetStats{Name: req.Msg.Name})
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errf(connect.CodeNotFound, "no queue %q", req.Msg.Name)
	}
	return connect.NewResponse(&jqpb.GetQueueStatsResponse{Stats: statsPB(s)}), nil
}

func (a *API) GetSystemStatus(ctx context.Context, _ *connect.Request[jqpb.GetSystemStatusRequest]) (*connect.Response[jqpb.GetSystemStatusResponse], error) {
	healthy := a.healthy()
	res := &jqpb.GetSystemStatusResponse{Healthy: healthy}
	logMsg := "ok"
	if !healthy {
		logMsg = "the command log failed or the node is not ready; it refuses requests until restarted"
	}
	res.Components = append(res.Components, &jqpb.ComponentStatus{Name: "log", Healthy: healthy, Message: logMsg})
	qs, err := a.queues(ctx)
	if err != nil {
		res.Healthy = false
		var ce *connect.Error
		errors.As(err, &ce)
		res.Components = append(res.Components, &jqpb.ComponentStatus{Name: "engine", Healthy: false, Message: ce.Message()})
	} else {
		res.Components = append(res.Components, &jqpb.ComponentStatus{Name: "engine", Healthy: true,
			Message: fmt.Sprintf("%d partitions", a.parts)})
		for _, q := range qs {
			res.QueueStats = append(res.QueueStats, statsPB(q.stats()))
		}
	}
	active, total := a.hub.counts()
	res.ActiveWorkers = int32(min(active, math.MaxInt32))
	res.Components = append(res.Components, &jqpb.ComponentStatus{Name: "workers", Healthy: true,
		Message: fmt.Sprintf("%d active of %d known", active, total)})
	return connect.NewResponse(res), nil
}

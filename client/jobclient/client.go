// Package jobclient is the Go client of Surge's job queues: submit and
// inspect jobs, and run handler functions as a worker.
//
// It speaks the jq gRPC API (JobService, WorkerService) that `surge serve`
// serves, over cleartext HTTP/2 for an http:// URL and HTTP/2 over TLS for
// an https:// one (WithTLSConfig to trust a private CA, WithToken for a
// server that asks for tokens). Submitting:
//
//	c := jobclient.New("http://127.0.0.1:8080")
//	id, err := jobclient.SubmitJSON(ctx, c, "emails", Email{To: "a@b.c"}, jobclient.SubmitOptions{Priority: 5})
//
// Working, in the manner of River's Worker[T]: register a typed handler per
// queue, then Run until the context is cancelled (which drains):
//
//	w := jobclient.NewWorker(c, jobclient.WorkerConfig{Concurrency: 8})
//	jobclient.Handle(w, "emails", func(ctx context.Context, job *jobclient.Job[Email]) ([]byte, error) {
//		return nil, send(ctx, job.Args)
//	})
//	err := w.Run(ctx)
//
// Errors from the server are *connect.Error values; connect.CodeOf(err)
// tells NotFound (no such queue or job), InvalidArgument, FailedPrecondition
// (wrong state), ResourceExhausted and Unavailable (retry later) apart.
package jobclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// Client calls one Surge server. It is safe for concurrent use.
type Client struct {
	jobs    jqpbconnect.JobServiceClient
	workers jqpbconnect.WorkerServiceClient
}

// Option configures New.
type Option func(*options)

type options struct {
	httpClient connect.HTTPClient
	connect    []connect.ClientOption
	tls        *tls.Config
	token      string
}

// WithTLSConfig is the TLS configuration of the default HTTP client for
// an https:// server, e.g. with RootCAs holding a private CA (default:
// the system's CAs, TLS 1.2 at least).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// WithToken sends token as "Authorization: Bearer <token>" on every call,
// streams included.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithHTTPClient replaces the default HTTP client (cleartext HTTP/2, with
// pings that notice a dead connection within about 20 s). A client given
// here must speak HTTP/2 for the gRPC protocol and for the worker's stream.
func WithHTTPClient(hc connect.HTTPClient) Option {
	return func(o *options) { o.httpClient = hc }
}

// WithConnectOptions adds connect client options (interceptors,
// compression, or connect.WithProtoJSON with connect's own protocol); they
// come after the default connect.WithGRPC, so a protocol given here wins.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(o *options) { o.connect = append(o.connect, opts...) }
}

// DefaultHTTPClient is the HTTP client New uses unless told otherwise:
// HTTP/2 without TLS (h2c), as `surge serve` listens.
func DefaultHTTPClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols: p,
		// A worker's stream can be idle for hours; without pings a
		// server that vanished without closing the connection (a
		// partition, a killed VM) would leave it waiting forever.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 5 * time.Second},
	}}
}

// TLSHTTPClient is the HTTP client New uses for an https:// server:
// HTTP/2 over TLS with cfg (nil: the system's CAs, TLS 1.2 at least), and
// pings as DefaultHTTPClient's.
func TLSHTTPClient(cfg *tls.Config) *http.Client {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	hc := DefaultHTTPClient()
	tr := hc.Transport.(*http.Transport)
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	tr.TLSClientConfig = cfg
	return hc
}

// New returns a client of the server at baseURL, e.g.
// "http://127.0.0.1:8080" or "https://jobs.example:8443".
func New(baseURL string, opts ...Option) *Client {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.httpClient == nil {
		o.httpClient = DefaultHTTPClient()
		if strings.HasPrefix(baseURL, "https://") {
			o.httpClient = TLSHTTPClient(o.tls)
		}
	}
	copts := []connect.ClientOption{connect.WithGRPC()}
	if o.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer("Bearer "+o.token)))
	}
	copts = append(copts, o.connect...)
	// The caller's span goes with calls about jobs; the worker's calls
	// carry each job's own trace (traced, in worker.go).
	jopts := append([]connect.ClientOption{connect.WithInterceptors(propagateTrace())}, copts...)
	return &Client{
		jobs:    jqpbconnect.NewJobServiceClient(o.httpClient, baseURL, jopts...),
		workers: jqpbconnect.NewWorkerServiceClient(o.httpClient, baseURL, copts...),
	}
}

// SubmitOptions are a job's settings; the zero value takes the queue's.
type SubmitOptions struct {
	Priority   int           // 0 to 9, 9 first
	MaxRetries int           // 0: the queue's default
	TTL        time.Duration // 0: the queue's; also the stock worker's timeout. Rounded up to whole seconds.
	NotBefore  time.Time     // zero: at once
	// IdempotencyKey, if set, makes a repeated submit with the same key
	// in the same queue return the first submit's job, so a submit whose
	// answer was lost can be retried safely.
	IdempotencyKey string
}

func (o SubmitOptions) request(queue string, payload []byte) (*jqpb.SubmitJobRequest, error) {
	ttl, err := seconds(o.TTL)
	if err != nil {
		return nil, err
	}
	r := &jqpb.SubmitJobRequest{
		QueueName:      queue,
		Payload:        payload,
		Priority:       int32(clampInt32(o.Priority)),
		MaxRetries:     int32(clampInt32(o.MaxRetries)),
		TtlSeconds:     ttl,
		IdempotencyKey: o.IdempotencyKey,
	}
	if !o.NotBefore.IsZero() {
		r.NotBefore = timestamppb.New(o.NotBefore)
	}
	return r, nil
}

// clampInt32 keeps an out-of-range int out of range after conversion, so
// the server refuses it instead of a wrapped value slipping through.
func clampInt32(n int) int64 {
	return int64(max(min(n, math.MaxInt32), math.MinInt32))
}

// seconds rounds a TTL up to whole seconds, the wire's unit, so a TTL is
// never shortened.
func seconds(d time.Duration) (int32, error) {
	if d < 0 {
		return 0, fmt.Errorf("jobclient: negative TTL %v", d)
	}
	s := (d + time.Second - 1) / time.Second
	if s > math.MaxInt32 {
		return 0, fmt.Errorf("jobclient: TTL %v too long", d)
	}
	return int32(s), nil
}

// Submit adds a job to queue and returns its id once the job is durable.
func (c *Client) Submit(ctx context.Context, queue string, payload []byte, opts SubmitOptions) (string, error) {
	req, err := opts.request(queue, payload)
	if err != nil {
		return "", err
	}
	resp, err := c.jobs.SubmitJob(ctx, connect.NewRequest(req))
	if err != nil {
		return "", err
	}
	return resp.Msg.JobId, nil
}

// SubmitJSON submits args encoded as JSON, as Handle[T] decodes them.
func SubmitJSON[T any](ctx context.Context, c *Client, queue string, args T, opts SubmitOptions) (string, error) {
	payload, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("jobclient: encoding the payload: %w", err)
	}
	return c.Submit(ctx, queue, payload, opts)
}

// NewJob is one job of SubmitMany.
type NewJob struct {
	Queue   string
	Payload []byte
	Options SubmitOptions
}

// SubmitMany submits jobs in one call and one durable write (at most
// 1000): all of them or, if any is refused, none. ids[i] is jobs[i]'s.
func (c *Client) SubmitMany(ctx context.Context, jobs []NewJob) ([]string, error) {
	req := &jqpb.SubmitJobsRequest{Jobs: make([]*jqpb.SubmitJobRequest, len(jobs))}
	for i, j := range jobs {
		r, err := j.Options.request(j.Queue, j.Payload)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		req.Jobs[i] = r
	}
	resp, err := c.jobs.SubmitJobs(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	if len(resp.Msg.JobIds) != len(jobs) {
		return nil, fmt.Errorf("jobclient: server answered %d job ids for %d jobs", len(resp.Msg.JobIds), len(jobs))
	}
	return resp.Msg.JobIds, nil
}

// Status is a job's state.
type Status int

// The states of a job, numbered as the wire's JobStatus.
const (
	StatusUnspecified  Status = 0
	StatusPending      Status = 1 // waiting: ready, delayed, or backing off before a retry
	StatusAssigned     Status = 2 // pushed to a worker, not yet started
	StatusRunning      Status = 3 // its worker started it
	StatusDone         Status = 4
	StatusFailed       Status = 5 // failed; retried after a backoff if retries are left
	StatusDeadLettered Status = 6 // failed for good, cancelled, or past its TTL
)

func (s Status) String() string { return jqpb.JobStatus(s).String() }

// JobInfo is a job as the server holds it.
type JobInfo struct {
	ID          string
	Queue       string
	Payload     []byte
	Priority    int
	Status      Status
	MaxRetries  int
	RetryCount  int
	CreatedAt   time.Time
	StartedAt   time.Time // zero if not started
	CompletedAt time.Time // zero if not finished
	NotBefore   time.Time // zero if none
	WorkerID    string
	Result      []byte
	Error       string
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func jobInfo(j *jqpb.Job) JobInfo {
	return JobInfo{
		ID: j.JobId, Queue: j.QueueName, Payload: j.Payload, Priority: int(j.Priority),
		Status: Status(j.Status), MaxRetries: int(j.MaxRetries), RetryCount: int(j.RetryCount),
		CreatedAt: timeOf(j.CreatedAt), StartedAt: timeOf(j.StartedAt), CompletedAt: timeOf(j.CompletedAt),
		NotBefore: timeOf(j.NotBefore), WorkerID: j.WorkerId, Result: j.Result, Error: j.ErrorMessage,
	}
}

// Get returns a job.
func (c *Client) Get(ctx context.Context, jobID string) (JobInfo, error) {
	resp, err := c.jobs.GetJobStatus(ctx, connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: jobID}))
	if err != nil {
		return JobInfo{}, err
	}
	if resp.Msg.Job == nil {
		return JobInfo{}, errors.New("jobclient: server answered no job")
	}
	return jobInfo(resp.Msg.Job), nil
}

// Event is one transition in a job's log.
type Event struct {
	ID       int64
	JobID    string
	From, To Status
	WorkerID string
	Reason   string
	At       time.Time
}

// Logs returns every transition of a job, oldest first.
func (c *Client) Logs(ctx context.Context, jobID string) ([]Event, error) {
	resp, err := c.jobs.GetJobLogs(ctx, connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: jobID}))
	if err != nil {
		return nil, err
	}
	events := make([]Event, len(resp.Msg.Events))
	for i, e := range resp.Msg.Events {
		events[i] = Event{ID: e.Id, JobID: e.JobId, From: Status(e.FromStatus), To: Status(e.ToStatus),
			WorkerID: e.WorkerId, Reason: e.Reason, At: timeOf(e.OccurredAt)}
	}
	return events, nil
}

// ListOptions select the jobs List returns.
type ListOptions struct {
	Queue     string
	Status    Status // StatusUnspecified: any
	Limit     int    // 0: 20; at most 100
	PageToken string // the previous page's next token; empty: the first page
}

// List returns a page of a queue's jobs and the token of the next page
// (empty after the last).
func (c *Client) List(ctx context.Context, opts ListOptions) (jobs []JobInfo, next string, err error) {
	resp, err := c.jobs.ListJobs(ctx, connect.NewRequest(&jqpb.ListJobsRequest{
		QueueName: opts.Queue, Status: jqpb.JobStatus(opts.Status),
		Limit: int32(clampInt32(opts.Limit)), PageToken: opts.PageToken,
	}))
	if err != nil {
		return nil, "", err
	}
	jobs = make([]JobInfo, len(resp.Msg.Jobs))
	for i, j := range resp.Msg.Jobs {
		jobs[i] = jobInfo(j)
	}
	return jobs, resp.Msg.NextPageToken, nil
}

// Cancel cancels a job: a waiting one ends at once, a running one's worker
// is told to stop it.
func (c *Client) Cancel(ctx context.Context, jobID string) error {
	_, err := c.jobs.CancelJob(ctx, connect.NewRequest(&jqpb.CancelJobRequest{JobId: jobID}))
	return err
}

// Retry puts a FAILED or DEAD_LETTERED job back in its queue.
func (c *Client) Retry(ctx context.Context, jobID string) error {
	_, err := c.jobs.RetryJob(ctx, connect.NewRequest(&jqpb.RetryJobRequest{JobId: jobID}))
	return err
}

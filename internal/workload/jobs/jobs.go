// Package jobs is the third workload: priority job queues with leases,
// retries, dead letters and cancellation, serving the jq gRPC API (see
// docs/API.md). All of its rules are in this file.
//
// A queue and every job in it live in the queue's partition (key
// q/<name>): dispatch by priority and submission order then needs nothing
// from another partition, and a lease is one Apply. The API chooses job
// ids (NewJobID) so that "j/"+id hashes to the queue's partition, so a
// command about a job (ack, report, cancel, retry) is routed by the job id
// alone, with no lookup of its queue.
//
// States and transitions (compat doc plus the additions):
//
//	PENDING  → ASSIGNED        lease
//	ASSIGNED → RUNNING         ack (jq's own workers never ack)
//	ASSIGNED | RUNNING → DONE | FAILED          report
//	ASSIGNED | RUNNING → PENDING                lease expired, a retry left;
//	                           or released by its worker (no retry counted)
//	FAILED   → PENDING         backoff timer (a retry left)
//	FAILED   → DEAD_LETTERED   retries exhausted
//	ASSIGNED | RUNNING → DEAD_LETTERED          lease expired, none left;
//	                           or a cancelled running job reports / expires
//	PENDING | ASSIGNED → DEAD_LETTERED          cancel, or TTL (PENDING)
//	FAILED | DEAD_LETTERED → PENDING            manual retry
//
// A PENDING job is either ready (in its queue's dispatch heap) or waiting
// for its not_before (a "ready/" timer moves it into the heap); only ready
// jobs are leased, so a lease never looks at a job it cannot take.
//
// Time is the input's stamp only; backoff jitter is derived from the job
// id and retry count, so replay arms the same timers.
//
// Only a command that changes state is logged: every rejection is
// declared Unchanged.
//
// For the API: CreateQueue, DeleteQueue, Pause/ResumeQueue, Submit,
// SubmitBatch, Lease and Unsent go to QueueKey(queue); Ack, Report,
// Cancel, Retry and Release of one job to JobKey(id); Extend (a
// heartbeat), Reclaim (a stream opening) and Release of all of a
// worker's jobs to every partition (a worker's leases may be on any; a
// partition where it holds none answers Same and logs nothing).
//
// Leases and worker processes. A lease names the worker id and the
// session (one StreamJobs call) that pushed the job. A worker id outlives
// its processes (a restarted worker comes back with the same id), so
// the id alone does not say whether anyone still runs a job: a lease is
// extended only by a heartbeat that names the job (Surge's workers list
// what they hold) or that comes while the session that holds it is the
// worker's live stream (jq's workers cannot list), and a new session of a
// known id settles what older sessions hold at once (Reclaim): a worker
// that lists what it holds keeps those and gives back the rest, one that
// cannot list is offered them again. Heartbeat (every lease of the id)
// is kept only to replay logs written before sessions.
// Queries: GetJob, GetJobLogs and ListJobs on the job's or queue's
// partition; ListQueues on every partition, merged. Notes: QueueReady
// (push to workers waiting on that queue, then Lease), CancelRequested
// (tell the worker), JobEnded (wake waiters).
package jobs

import (
	"fmt"
	"strconv"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/retain"
	"github.com/surge-run/surge/internal/wire"
)

// WorkloadID is written into every log record of this workload.
const WorkloadID uint8 = 3

// Status of a job, numbered as jq's JobStatus enum.
type Status uint8

const (
	StatusUnspecified Status = iota
	Pending
	Assigned
	Running
	Done
	Failed
	DeadLettered
	numStatuses
)

var statusNames = [...]string{"JOB_STATUS_UNSPECIFIED", "PENDING", "ASSIGNED", "RUNNING", "DONE", "FAILED", "DEAD_LETTERED"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Finished reports whether s is an end state (purged after retention).
func (s Status) Finished() bool { return s == Done || s == DeadLettered }

// Reasons recorded in job events and dead letters.
const (
	ReasonSubmitted     = "SUBMITTED"
	ReasonLeased        = "LEASED"
	ReasonAcked         = "ACKED"
	ReasonSucceeded     = "SUCCEEDED"
	ReasonFailed        = "FAILED"
	ReasonRetry         = "RETRY"
	ReasonExhausted     = "RETRIES_EXHAUSTED"
	ReasonLeaseExpired  = "LEASE_EXPIRED"
	ReasonCancelled     = "CANCELLED"
	ReasonCancelPending = "CANCEL_REQUESTED"
	ReasonTTL           = "TTL"
	ReasonManualRetry   = "MANUAL_RETRY"
	ReasonReleased      = "RELEASED"
	// A worker came back (a new stream of its id) without the job: lost
	// with the process that had it.
	ReasonWorkerLost = "WORKER_LOST"
	// Pushed again on a worker's new stream (a worker that cannot say
	// what it holds).
	ReasonReoffered = "REOFFERED"
	// The push never reached the worker: its stream was gone.
	ReasonNotDelivered = "NOT_DELIVERED"
)

// Limits. A limit on everything keeps a partition's memory bounded; the
// ones a deployment may want to change are in Limits.
const (
	DefaultQueue      = "default"
	DefaultMaxRetries = 3
	MaxMaxRetries     = 100
	MaxPriority       = 9
	MaxNameLen        = 256
	MaxIDLen          = 128
	MaxKeyLen         = 256
	MaxErrorLen       = 4096
	MaxPayloadBytes   = 1 << 20
	// MaxListBytes bounds the payloads and results of one ListJobs page
	// (always at least one job; the page token goes on): 100 jobs of a
	// 1 MiB payload and a 1 MiB result were a 200 MB answer, and a jq
	// client built on grpc-go refuses any answer over 4 MiB by default.
	MaxListBytes    = 3 << 20
	MaxLeaseBatch   = 1000
	MaxSubmitBatch  = 1000
	MaxEventsPerJob = 100
	// MaxHeldJobs bounds the job ids a heartbeat or a new stream names.
	MaxHeldJobs         = MaxLeaseBatch
	DefaultRetentionNs  = int64(24 * 3600e9)
	DefaultMaxQueueJobs = 100_000
	DefaultMaxQueues    = 1_000
	// About 45 MB of finished jobs per partition (454 B each, measured).
	DefaultMaxFinished = 100_000
	// DefaultMaxEndedBytes bounds the bytes of a partition's finished
	// jobs, whose payloads and results are each up to MaxPayloadBytes:
	// 100,000 of 2 MiB would be 200 GB. Jobs of the peer's load test
	// (454 B) reach DefaultMaxFinished first.
	DefaultMaxEndedBytes = int64(128 << 20)
	// DefaultMaxHeldBytes bounds the bytes of payloads a partition's
	// unfinished jobs hold (Submit.MaxHeldBytes): 100,000 jobs of 1 MiB
	// in a queue would be 100 GB. 128 jobs of the largest payload, or
	// 3.5 million of the peer's 38-byte one.
	DefaultMaxHeldBytes = int64(128 << 20)
	backoffBaseNs       = int64(5e9)
	backoffCapNs        = int64(300e9)
)

// Limits a partition enforces; zero fields take the defaults.
type Limits struct {
	MaxJobsPerQueue int // unfinished jobs of a queue (PENDING to FAILED)
	MaxQueues       int // queues per partition
	// MaxFinished bounds the finished jobs a partition keeps: past it the
	// oldest-ended go before their retention. Otherwise a steady 10,000
	// jobs/s with the default 24 h retention would hold 860 million.
	MaxFinished int
	// MaxEndedBytes bounds the bytes of the finished jobs' records
	// (payload, result, error, events) a partition keeps: past it too
	// the oldest go before their retention.
	MaxEndedBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxJobsPerQueue <= 0 {
		l.MaxJobsPerQueue = DefaultMaxQueueJobs
	}
	if l.MaxQueues <= 0 {
		l.MaxQueues = DefaultMaxQueues
	}
	if l.MaxFinished <= 0 {
		l.MaxFinished = DefaultMaxFinished
	}
	if l.MaxEndedBytes <= 0 {
		l.MaxEndedBytes = DefaultMaxEndedBytes
	}
	return l
}

// QueueKey and JobKey route commands; see the package comment.
func QueueKey(name string) string { return "q/" + name }
func JobKey(id string) string     { return "j/" + id }

// Queue is one job queue and its running totals.
type Queue struct {
	Name        string
	MaxRetries  int32
	TTLNs       int64
	CreatedAt   int64
	Paused      bool
	Processed   int64 // reports received (success and failure)
	Failures    int64
	DurationSum int64 // ns from start to report, over the reports

	counts [numStatuses]int64
	ready  [MaxPriority + 1]jobHeap
	// order holds the queue's jobs by submission (seq) for ListJobs;
	// purged jobs leave a hole (seq 0) that compaction removes.
	order []jobRef
	holes int
	keys  map[string]string // idempotency key → job id
	jobs  int               // jobs held, finished ones included
}

// Count is the number of the queue's jobs in status s.
func (q *Queue) Count(s Status) int64 { return q.counts[s] }

// unfinished is the number of the queue's jobs that have not ended.
func (q *Queue) unfinished() int { return q.jobs - int(q.counts[Done]+q.counts[DeadLettered]) }

// jobRef is one job in its queue's order: a live job (j), or an ended
// one's record with what ListJobs and the ops page read without
// decoding it. Seq 0 is a hole.
type jobRef struct {
	j      *Job
	seq    uint64
	rec    recLoc
	status Status
	// cached, in a fork only: a pending job's cached encoding,
	// Machine.forkEnc[rec.off].
	cached           bool
	created, started int64
}

// JobEvent is one transition of a job. ID counts from 1 per job.
type JobEvent struct {
	ID       int64
	From, To Status
	Worker   string
	Reason   string
	At       int64
}

// Job is one unit of work.
type Job struct {
	ID, Queue   string
	Payload     []byte
	Priority    int32
	Status      Status
	MaxRetries  int32
	RetryCount  int32
	CreatedAt   int64
	StartedAt   int64
	CompletedAt int64
	Worker      string
	Session     string // the stream that holds the lease (leased jobs only)
	Result      []byte
	NotBefore   int64
	Error       string
	TTLNs       int64
	TTLFrom     int64 // the TTL runs from here: submission, or a manual retry
	RetentionNs int64
	IdemKey     string
	LeaseUntil  int64
	CancelAsked bool
	DeadReason  string
	Seq         uint64 // submission order within the partition
	Events      []JobEvent
	nextEvent   int64
	heapIdx     int // position in its ready heap, -1 if not there
	purgeAt     int64
	snap        []byte // print and snapshot encoding a fork cached (snapcache.go)
}

// Ready reports whether a PENDING job may be leased at now.
func (j *Job) Ready(now int64) bool { return j.Status == Pending && j.NotBefore <= now }

// Options configure a partition's machine.
type Options struct {
	// OwnsDefault: the partition holds the default queue, which exists
	// from the start (it is put into the empty state, so replay from an
	// empty log and a snapshot agree) and cannot be deleted.
	OwnsDefault bool
	Limits      Limits
	// Listening says whether anything takes QueueReady notes now (nil:
	// always). Without a worker stream to wake every submit's note was
	// an allocation and a call for nothing. Notes are not state, so
	// reading it leaves replay as it was; a stream that links later
	// looks for work itself.
	Listening func() bool
}

// Workload creates the jobs machines of an engine with Partitions
// partitions; the default queue goes to the partition its key hashes to.
type Workload struct {
	Partitions int
	Limits     Limits
	Listening  func() bool // Options.Listening
}

func (w *Workload) ID() uint8    { return WorkloadID }
func (w *Workload) Name() string { return "jobs" }
func (w *Workload) NewMachine(p int) engine.Machine {
	owns := engine.PartitionOfHash(engine.Hash(QueueKey(DefaultQueue)), w.Partitions) == p
	return NewMachine(Options{OwnsDefault: owns, Limits: w.Limits, Listening: w.Listening})
}

// Machine is the jobs state of one partition.
type Machine struct {
	opts   Options
	queues map[string]*Queue
	// jobs: the unfinished jobs, and those a command being applied
	// finished (toEnd); ended ones are records in ended.
	jobs map[string]*Job
	// payloads: the bytes of the payloads of jobs (Submit.MaxHeldBytes).
	payloads int64
	ended    endedJobs
	toEnd    []*Job
	seq      uint64
	// pend: pending jobs kept as records until their first lease
	// (pending.go).
	pend endedJobs
	// leases: worker → its ASSIGNED/RUNNING jobs here, for heartbeats.
	leases map[string]map[string]*Job
	// purgeQ: finished jobs in the order they finished; see purge.
	purgeQ retain.Queue[purgeEntry]
	// inBatch holds back QueueReady notes while a SubmitBatch applies.
	inBatch bool
	// holdNotes holds back QueueReady notes while a submit that leases
	// applies (submitLease): noted after its lease, if jobs are left.
	holdNotes bool
	// finished counts DONE and DEAD_LETTERED jobs (Limits.MaxFinished).
	finished int
	// trace and traces: see trace.go.
	trace  engine.TraceContext
	traces map[string]engine.TraceContext
	// snapshotHint: see SnapshotSizeHint.
	snapshotHint int
	// forkEnc, in a fork only, holds the cached encodings of its pending
	// jobs (snapcache.go).
	forkEnc [][]byte
	// dec decodes the partition's commands (Decode).
	dec wire.Decoder
	// spare is the struct of the last new job kept as a record
	// (keepPending), for the next one: a backlog of records made one
	// each, only to be encoded and dropped.
	spare *newJob
}

type purgeEntry struct {
	key jobKey
	At  int64
}

func (e purgeEntry) Due() int64 { return e.At }

// NewMachine returns an empty partition (with the default queue if it
// owns it).
func NewMachine(o Options) *Machine {
	o.Limits = o.Limits.withDefaults()
	m := &Machine{opts: o}
	m.reset()
	return m
}

func (m *Machine) reset() {
	m.queues = map[string]*Queue{}
	m.jobs = map[string]*Job{}
	m.ended = newEndedJobs()
	m.pend = newEndedJobs()
	m.toEnd = nil
	m.leases = map[string]map[string]*Job{}
	m.seq = 0
	m.purgeQ = retain.Queue[purgeEntry]{}
	m.finished = 0
	m.payloads = 0
	m.traces = nil
	if m.opts.OwnsDefault {
		m.queues[DefaultQueue] = newQueue(DefaultQueue, DefaultMaxRetries, 0, 0)
	}
}

func newQueue(name string, maxRetries int32, ttl, now int64) *Queue {
	return &Queue{Name: name, MaxRetries: maxRetries, TTLNs: ttl, CreatedAt: now, keys: map[string]string{}}
}

// Outcome of a command, for the API layer to map to a status code.
type Outcome uint8

const (
	OK        Outcome = iota // applied
	Created                  // a new queue or job
	Same                     // already so (idempotent repeat); nothing changed
	NotFound                 // unknown queue or job
	Invalid                  // bad input (INVALID_ARGUMENT)
	Conflict                 // wrong state (FAILED_PRECONDITION)
	Exhausted                // a limit (RESOURCE_EXHAUSTED)
)

// Result is the reply of every command; Jobs and Queue are copies.
// Each holds the result of every job of a SubmitBatch, in order.
type Result struct {
	Outcome Outcome
	Msg     string
	// Later: a refusal that passes as jobs finish (a full queue, the
	// partition's payload bytes), which a client may retry after a while.
	Later bool
	Queue *Queue
	Jobs  []*Job
	Each  []*Result
	// Next: the jobs a Report with Next > 0 leased to its stream.
	Next []*Job
	// Traces: a lease's traced jobs' dispatch contexts (trace.go).
	Traces map[string]engine.TraceContext
}

// Notes for observers (Effects.Notify), released once durable.
type (
	// QueueReady: the queue gained ready jobs; push to waiting workers.
	QueueReady struct {
		Queue string
		Ready int
	}
	// CancelRequested: tell Worker to stop running JobID.
	CancelRequested struct{ JobID, Worker string }
	// JobEnded: JobID reached DONE or DEAD_LETTERED.
	JobEnded struct {
		JobID, Queue string
		Status       Status
	}
)

// Apply implements engine.Machine.
func (m *Machine) Apply(in *engine.Input, fx *engine.Effects) {
	var res *Result
	if _, ok := in.Cmd.(timerCommand); ok && in.Kind != engine.FromTimer {
		// A forged expiry from a client could dead-letter any job.
		res = fail(Invalid, "jobs: %T is applied by its timer only", in.Cmd)
	} else {
		m.trace = in.Trace
		res = m.apply(in.Cmd, in.TimeNs, fx)
		m.endFinished()
		m.trace = engine.TraceContext{}
	}
	if res.Outcome != OK && res.Outcome != Created {
		fx.Unchanged()
	}
	fx.Reply(res)
}

func (m *Machine) apply(cmd engine.Command, now int64, fx *engine.Effects) *Result {
	switch c := cmd.(type) {
	case *CreateQueue:
		return m.createQueue(c, now)
	case *DeleteQueue:
		return m.deleteQueue(c, fx)
	case *PauseQueue:
		return m.pauseQueue(c.Name, true, now, fx)
	case *ResumeQueue:
		return m.pauseQueue(c.Name, false, now, fx)
	case *Submit:
		return m.submit(c, now, fx)
	case *SubmitBatch:
		return m.submitBatch(c, now, fx)
	case *SubmitLease:
		return m.submitLease(c, now, fx)
	case *SubmitBatchLease:
		return m.submitBatchLease(c, now, fx)
	case *Lease:
		return m.lease(c, now, fx)
	case *Ack:
		return m.ack(c, now)
	case *Heartbeat:
		return m.heartbeat(c, now, fx)
	case *Extend:
		return m.extend(c, now, fx)
	case *Reclaim:
		return m.reclaim(c, now, fx)
	case *Unsent:
		return m.unsent(c, now, fx)
	case *Report:
		return m.report(c, now, fx)
	case *Release:
		return m.release(c, now, fx)
	case *Cancel:
		return m.cancel(c, now, fx)
	case *Retry:
		return m.retry(c, now, fx)
	case *LeaseExpired:
		return m.leaseExpired(c, now, fx)
	case *RetryDue:
		return m.retryDue(c, now, fx)
	case *ReadyDue:
		return m.readyDue(c, now, fx)
	case *TTLExpired:
		return m.ttlExpired(c, now, fx)
	case *PurgeJobs:
		return m.purge(now, fx)
	}
	return fail(Invalid, "jobs: unknown command %T", cmd)
}

func fail(o Outcome, format string, a ...any) *Result {
	return &Result{Outcome: o, Msg: fmt.Sprintf(format, a...)}
}

// full is fail(Exhausted, …) for a refusal that passes as jobs finish.
func full(format string, a ...any) *Result {
	r := fail(Exhausted, format, a...)
	r.Later = true
	return r
}

func validName(what, s string) string {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Sprintf("%s must be 1 to %d bytes", what, MaxNameLen)
	}
	return ""
}

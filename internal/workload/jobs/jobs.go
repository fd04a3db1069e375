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
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/retain"
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
	backoffBaseNs      = int64(5e9)
	backoffCapNs       = int64(300e9)
)

// Limits a partition enforces; zero fields take the defaults.
type Limits struct {
	MaxJobsPerQueue int // unfinished jobs of a queue (PENDING to FAILED)
	MaxQueues       int // queues per partition
	// MaxFinished bounds the finished jobs a partition keeps: past it the
	// oldest-ended go before their retention. Otherwise a steady 10,000
	// jobs/s with the default 24 h retention would hold 860 million.
	MaxFinished int
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
	// purged jobs leave a nil that compaction removes.
	order []*Job
	holes int
	keys  map[string]string // idempotency key → job id
	jobs  int               // jobs held, finished ones included
}

// Count is the number of the queue's jobs in status s.
func (q *Queue) Count(s Status) int64 { return q.counts[s] }

// unfinished is the number of the queue's jobs that have not ended.
func (q *Queue) unfinished() int { return q.jobs - int(q.counts[Done]+q.counts[DeadLettered]) }

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
}

// Workload creates the jobs machines of an engine with Partitions
// partitions; the default queue goes to the partition its key hashes to.
type Workload struct {
	Partitions int
	Limits     Limits
}

func (w *Workload) ID() uint8    { return WorkloadID }
func (w *Workload) Name() string { return "jobs" }
func (w *Workload) NewMachine(p int) engine.Machine {
	owns := engine.PartitionOfHash(engine.Hash(QueueKey(DefaultQueue)), w.Partitions) == p
	return NewMachine(Options{OwnsDefault: owns, Limits: w.Limits})
}

// Machine is the jobs state of one partition.
type Machine struct {
	opts   Options
	queues map[string]*Queue
	jobs   map[string]*Job
	seq    uint64
	// leases: worker → its ASSIGNED/RUNNING jobs here, for heartbeats.
	leases map[string]map[string]*Job
	// purgeQ: finished jobs in the order they finished; see purge.
	purgeQ retain.Queue[purgeEntry]
	// inBatch holds back QueueReady notes while a SubmitBatch applies.
	inBatch bool
	// finished counts DONE and DEAD_LETTERED jobs (Limits.MaxFinished).
	finished int
}

type purgeEntry struct {
	JobID string
	At    int64
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
	m.leases = map[string]map[string]*Job{}
	m.seq = 0
	m.purgeQ = retain.Queue[purgeEntry]{}
	m.finished = 0
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
	Queue   *Queue
	Jobs    []*Job
	Each    []*Result
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
		res = m.apply(in.Cmd, in.TimeNs, fx)
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

func validName(what, s string) string {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Sprintf("%s must be 1 to %d bytes", what, MaxNameLen)
	}
	return ""
}

// --- queues ---

func (m *Machine) createQueue(c *CreateQueue, now int64) *Result {
	if msg := validName("queue name", c.Name); msg != "" {
		return fail(Invalid, "jobs: %s", msg)
	}
	if c.MaxRetries < 0 || c.MaxRetries > MaxMaxRetries || c.TTLNs < 0 {
		return fail(Invalid, "jobs: max_retries must be 0 to %d and ttl not negative", MaxMaxRetries)
	}
	mr := c.MaxRetries
	if mr == 0 {
		mr = DefaultMaxRetries
	}
	if q := m.queues[c.Name]; q != nil {
		if q.MaxRetries == mr && q.TTLNs == c.TTLNs {
			return &Result{Outcome: Same, Queue: copyQueue(q)}
		}
		return fail(Conflict, "jobs: queue %q exists with other settings", c.Name)
	}
	if len(m.queues) >= m.opts.Limits.MaxQueues {
		return fail(Exhausted, "jobs: at most %d queues per partition", m.opts.Limits.MaxQueues)
	}
	q := newQueue(c.Name, mr, c.TTLNs, now)
	m.queues[c.Name] = q
	return &Result{Outcome: Created, Queue: copyQueue(q)}
}

func (m *Machine) deleteQueue(c *DeleteQueue, fx *engine.Effects) *Result {
	q := m.queues[c.Name]
	if q == nil {
		return fail(NotFound, "jobs: no queue %q", c.Name)
	}
	if c.Name == DefaultQueue {
		return fail(Conflict, "jobs: the default queue cannot be deleted")
	}
	if live := q.unfinished(); live > 0 && !c.Force {
		return fail(Conflict, "jobs: queue %q has %d unfinished jobs (use force)", c.Name, live)
	}
	// dropJob compacts q.order as it goes: iterate over a copy.
	for _, j := range slices.Clone(q.order) {
		if j != nil {
			m.dropJob(j, fx)
		}
	}
	delete(m.queues, c.Name)
	return &Result{Outcome: OK}
}

func (m *Machine) pauseQueue(name string, pause bool, now int64, fx *engine.Effects) *Result {
	q := m.queues[name]
	if q == nil {
		return fail(NotFound, "jobs: no queue %q", name)
	}
	if q.Paused == pause {
		return &Result{Outcome: Same, Queue: copyQueue(q)}
	}
	q.Paused = pause
	if !pause {
		m.notifyReady(q, fx)
	}
	return &Result{Outcome: OK, Queue: copyQueue(q)}
}

func (m *Machine) notifyReady(q *Queue, fx *engine.Effects) {
	if q.Paused || m.inBatch {
		return
	}
	if n := q.readyCount(); n > 0 {
		fx.Notify(QueueReady{Queue: q.Name, Ready: n})
	}
}

func (q *Queue) readyCount() int {
	n := 0
	for i := range q.ready {
		n += len(q.ready[i])
	}
	return n
}

// --- submit and lease ---

func (m *Machine) submit(c *Submit, now int64, fx *engine.Effects) *Result {
	q := m.queues[c.Queue]
	if q == nil {
		return fail(NotFound, "jobs: no queue %q", c.Queue)
	}
	if res := m.checkSubmit(q, c); res != nil {
		return res
	}
	if q.unfinished() >= m.opts.Limits.MaxJobsPerQueue {
		return fail(Exhausted, "jobs: queue %q holds %d unfinished jobs, its limit", q.Name, q.unfinished())
	}
	return m.addJob(q, c, now, fx)
}

// checkSubmit refuses a submit that may not be applied (nil: it may, or
// it repeats an idempotency key and gets the same job back).
func (m *Machine) checkSubmit(q *Queue, c *Submit) *Result {
	switch {
	case c.JobID == "" || len(c.JobID) > MaxIDLen:
		return fail(Invalid, "jobs: job id must be 1 to %d bytes", MaxIDLen)
	case c.Priority < 0 || c.Priority > MaxPriority:
		return fail(Invalid, "jobs: priority must be 0 to %d", MaxPriority)
	case c.MaxRetries < 0 || c.MaxRetries > MaxMaxRetries:
		return fail(Invalid, "jobs: max_retries must be 0 to %d", MaxMaxRetries)
	case c.TTLNs < 0 || c.RetentionNs < 0:
		return fail(Invalid, "jobs: ttl and retention must not be negative")
	case len(c.Payload) > MaxPayloadBytes:
		return fail(Exhausted, "jobs: payload of %d bytes is over %d", len(c.Payload), MaxPayloadBytes)
	case len(c.IdempotencyKey) > MaxKeyLen:
		return fail(Invalid, "jobs: idempotency key over %d bytes", MaxKeyLen)
	}
	if c.IdempotencyKey != "" {
		if id, ok := q.keys[c.IdempotencyKey]; ok {
			return &Result{Outcome: Same, Jobs: []*Job{copyJob(m.jobs[id])}}
		}
	}
	if m.jobs[c.JobID] != nil {
		return fail(Conflict, "jobs: job id %q is taken", c.JobID)
	}
	return nil
}

func (m *Machine) addJob(q *Queue, c *Submit, now int64, fx *engine.Effects) *Result {
	mr, ttl := c.MaxRetries, c.TTLNs
	if mr == 0 {
		mr = q.MaxRetries
	}
	if ttl == 0 {
		ttl = q.TTLNs
	}
	m.seq++
	j := &Job{ID: c.JobID, Queue: q.Name, Payload: c.Payload, Priority: c.Priority, MaxRetries: mr, Status: Pending,
		CreatedAt: now, TTLFrom: now, NotBefore: c.NotBeforeNs, TTLNs: ttl, RetentionNs: c.RetentionNs,
		IdemKey: c.IdempotencyKey, Seq: m.seq, heapIdx: -1}
	m.jobs[j.ID] = j
	q.jobs++
	q.order = append(q.order, j)
	if j.IdemKey != "" {
		q.keys[j.IdemKey] = j.ID
	}
	q.counts[Pending]++
	m.record(j, StatusUnspecified, Pending, "", ReasonSubmitted, now)
	if ttl > 0 {
		m.setTimer(fx, "ttl/"+j.ID, addSat(now, ttl), &TTLExpired{JobID: j.ID})
	}
	m.makePending(q, j, now, fx)
	return &Result{Outcome: Created, Jobs: []*Job{copyJob(j)}}
}

// submitBatch applies each Submit as if alone: one bad job does not
// refuse the others, and each has its own result. All name one queue, so
// the batch is one partition's and costs one log record.
func (m *Machine) submitBatch(c *SubmitBatch, now int64, fx *engine.Effects) *Result {
	if len(c.Jobs) == 0 || len(c.Jobs) > MaxSubmitBatch {
		return fail(Invalid, "jobs: a batch holds 1 to %d jobs", MaxSubmitBatch)
	}
	for i := range c.Jobs {
		if c.Jobs[i].Queue != c.Jobs[0].Queue {
			return fail(Invalid, "jobs: a batch's jobs must share one queue")
		}
	}
	q := m.queues[c.Jobs[0].Queue]
	if q == nil {
		return fail(NotFound, "jobs: no queue %q", c.Jobs[0].Queue)
	}
	// All or nothing: every job is checked before any is added, so a
	// refused batch changes nothing and the client can fix it and resend
	// the whole. A key or id repeated within the batch counts as taken.
	res := &Result{Outcome: Same, Each: make([]*Result, len(c.Jobs))}
	ids := make(map[string]bool, len(c.Jobs))
	keys := map[string]int{}
	adds := 0
	for i := range c.Jobs {
		sub := &c.Jobs[i]
		r := m.checkSubmit(q, sub)
		if r == nil && ids[sub.JobID] {
			r = fail(Conflict, "jobs: job id %q is taken", sub.JobID)
		}
		if r != nil && r.Outcome != Same {
			return fail(r.Outcome, "%s (job %d of the batch; nothing was submitted)", r.Msg, i)
		}
		res.Each[i] = r
		if r != nil {
			continue
		}
		if sub.IdempotencyKey != "" {
			if k, ok := keys[sub.IdempotencyKey]; ok {
				res.Each[i] = &Result{Outcome: Same, Msg: strconv.Itoa(k)}
				continue
			}
			keys[sub.IdempotencyKey] = i
		}
		ids[sub.JobID] = true
		adds++
	}
	if q.unfinished()+adds > m.opts.Limits.MaxJobsPerQueue {
		return fail(Exhausted, "jobs: queue %q holds %d unfinished jobs; %d more would pass its limit of %d (nothing was submitted)",
			q.Name, q.unfinished(), adds, m.opts.Limits.MaxJobsPerQueue)
	}
	m.inBatch = true // one QueueReady for the batch, not one per job
	for i := range c.Jobs {
		switch r := res.Each[i]; {
		case r == nil:
			res.Each[i] = m.addJob(q, &c.Jobs[i], now, fx)
			res.Outcome = Created
		case r.Jobs == nil:
			// A key repeated within the batch: the job its first use made.
			k, _ := strconv.Atoi(r.Msg)
			res.Each[i] = &Result{Outcome: Same, Jobs: res.Each[k].Jobs}
		}
	}
	m.inBatch = false
	if res.Outcome == Created {
		m.notifyReady(q, fx)
	}
	return res
}

// makePending puts a job that has just become PENDING where it belongs:
// in the ready heap, or behind a timer for its not_before. A job whose
// TTL has passed goes to the dead letters instead.
func (m *Machine) makePending(q *Queue, j *Job, now int64, fx *engine.Effects) {
	if j.TTLNs > 0 && now >= addSat(j.TTLFrom, j.TTLNs) {
		m.deadLetter(q, j, "", ReasonTTL, now, fx)
		return
	}
	if j.NotBefore > now {
		m.setTimer(fx, "ready/"+j.ID, j.NotBefore, &ReadyDue{JobID: j.ID})
		return
	}
	q.ready[j.Priority].push(j)
	m.notifyReady(q, fx)
}

func (m *Machine) lease(c *Lease, now int64, fx *engine.Effects) *Result {
	q := m.queues[c.Queue]
	if q == nil {
		return fail(NotFound, "jobs: no queue %q", c.Queue)
	}
	if c.Worker == "" || len(c.Worker) > MaxIDLen || c.Max <= 0 || c.Max > MaxLeaseBatch || c.LeaseNs <= 0 || len(c.Session) > MaxIDLen {
		return fail(Invalid, "jobs: a lease needs a worker id, 1 to %d jobs and a positive duration", MaxLeaseBatch)
	}
	if q.Paused {
		return &Result{Outcome: Same}
	}
	var out []*Job
	for p := MaxPriority; p >= 0 && len(out) < int(c.Max); p-- {
		h := &q.ready[p]
		for len(*h) > 0 && len(out) < int(c.Max) {
			j := h.pop()
			m.move(q, j, Assigned, c.Worker, ReasonLeased, now)
			j.Worker, j.Session = c.Worker, c.Session
			// jq's workers never ack, so the attempt starts at the lease;
			// an ack moves it to when the worker really started.
			j.StartedAt = now
			j.LeaseUntil = addSat(now, c.LeaseNs)
			m.addLease(j)
			m.setTimer(fx, "lease/"+j.ID, j.LeaseUntil, &LeaseExpired{JobID: j.ID})
			out = append(out, copyJob(j))
		}
	}
	if len(out) == 0 {
		return &Result{Outcome: Same}
	}
	return &Result{Outcome: OK, Jobs: out}
}

func (m *Machine) addLease(j *Job) {
	s := m.leases[j.Worker]
	if s == nil {
		s = map[string]*Job{}
		m.leases[j.Worker] = s
	}
	s[j.ID] = j
}

func (m *Machine) endLease(j *Job, fx *engine.Effects) {
	if s := m.leases[j.Worker]; s != nil {
		delete(s, j.ID)
		if len(s) == 0 {
			delete(m.leases, j.Worker)
		}
	}
	fx.CancelTimer("lease/" + j.ID)
	j.LeaseUntil, j.Session = 0, ""
}

// --- worker reports ---

// held finds a job the worker holds a lease on.
func (m *Machine) held(id, worker string) (*Job, *Result) {
	j := m.jobs[id]
	if j == nil {
		return nil, fail(NotFound, "jobs: no job %q", id)
	}
	if (j.Status != Assigned && j.Status != Running) || j.Worker != worker {
		return nil, fail(Conflict, "jobs: job %q is %s, not leased to %q", id, j.Status, worker)
	}
	return j, nil
}

func (m *Machine) ack(c *Ack, now int64) *Result {
	j, res := m.held(c.JobID, c.Worker)
	if res != nil {
		return res
	}
	if j.Status == Running {
		return &Result{Outcome: Same, Jobs: []*Job{copyJob(j)}}
	}
	m.move(m.queues[j.Queue], j, Running, c.Worker, ReasonAcked, now)
	j.StartedAt = now
	return &Result{Outcome: OK, Jobs: []*Job{copyJob(j)}}
}

// heartbeat extends every lease of the worker id: the rule of logs
// written before sessions, kept so that they replay as they ran.
func (m *Machine) heartbeat(c *Heartbeat, now int64, fx *engine.Effects) *Result {
	if c.LeaseNs <= 0 {
		return fail(Invalid, "jobs: a heartbeat needs a positive lease duration")
	}
	return m.extendWhere(c.Worker, now, c.LeaseNs, fx, func(*Job) bool { return true })
}

// extend is a heartbeat: it extends the leases of the worker's jobs that
// the worker names (Declared) or that its live stream holds (Session).
func (m *Machine) extend(c *Extend, now int64, fx *engine.Effects) *Result {
	if c.LeaseNs <= 0 || len(c.JobIDs) > MaxHeldJobs {
		return fail(Invalid, "jobs: a heartbeat needs a positive lease duration and names at most %d jobs", MaxHeldJobs)
	}
	named := make(map[string]bool, len(c.JobIDs))
	for _, id := range c.JobIDs {
		named[id] = true
	}
	return m.extendWhere(c.Worker, now, c.LeaseNs, fx, func(j *Job) bool {
		if c.Declared {
			return named[j.ID]
		}
		return c.Session != "" && j.Session == c.Session
	})
}

// extendWhere extends the worker's leases that pick chooses. The reply
// lists every job the worker holds here, extended or not: the API counts
// a worker's unreported jobs from it, so a job whose lease ran out (and
// went to someone else) stops taking a slot.
func (m *Machine) extendWhere(worker string, now, leaseNs int64, fx *engine.Effects, pick func(*Job) bool) *Result {
	s := m.leases[worker]
	if len(s) == 0 {
		return &Result{Outcome: Same}
	}
	ids := make([]string, 0, len(s))
	for id := range s {
		ids = append(ids, id)
	}
	sort.Strings(ids) // the timers' order must not follow the map's
	out := make([]*Job, 0, len(ids))
	extended := false
	for _, id := range ids {
		j := s[id]
		if pick(j) && m.cover(j, j.Session, now, leaseNs, fx) {
			extended = true
		}
		out = append(out, copyJob(j))
	}
	if !extended {
		return &Result{Outcome: Same, Jobs: out}
	}
	return &Result{Outcome: OK, Jobs: out}
}

// cover gives j's lease to session and makes it last at least leaseNs
// from now; it reports whether anything changed.
func (m *Machine) cover(j *Job, session string, now, leaseNs int64, fx *engine.Effects) bool {
	changed := j.Session != session
	j.Session = session
	if until := addSat(now, leaseNs); until > j.LeaseUntil {
		j.LeaseUntil = until
		m.setTimer(fx, "lease/"+j.ID, until, &LeaseExpired{JobID: j.ID})
		changed = true
	}
	return changed
}

// heldBy lists the jobs worker holds here in submission order.
func (m *Machine) heldBy(worker string) []*Job {
	held := make([]*Job, 0, len(m.leases[worker]))
	for _, j := range m.leases[worker] {
		held = append(held, j)
	}
	sort.Slice(held, func(a, b int) bool { return held[a].Seq < held[b].Seq })
	return held
}

// reclaim settles, when a worker opens a stream (Session), the jobs its
// id holds from older sessions, so that none stays leased to a process
// that is gone. A worker that declares what it holds keeps those (now
// under the new session) and gives back the rest: one it never started
// (ASSIGNED) goes back uncounted, one it started (RUNNING) was lost with
// the process and counts as a retry, as an expired lease does. A worker
// that cannot declare (jq's) is offered them again on the new stream: a
// restarted one runs them, one that only reconnected gets a job it may
// already run; each offer counts as a retry, so a job that kills its
// worker does not come back for ever.
func (m *Machine) reclaim(c *Reclaim, now int64, fx *engine.Effects) *Result {
	if c.Worker == "" || c.Session == "" || len(c.Session) > MaxIDLen || c.LeaseNs <= 0 || len(c.Keep) > MaxHeldJobs {
		return fail(Invalid, "jobs: reclaiming needs a worker, a session, a positive lease and at most %d kept jobs", MaxHeldJobs)
	}
	keep := make(map[string]bool, len(c.Keep))
	for _, id := range c.Keep {
		keep[id] = true
	}
	res := &Result{Outcome: Same}
	for _, j := range m.heldBy(c.Worker) {
		if j.Session == c.Session {
			res.Jobs = append(res.Jobs, copyJob(j))
			continue
		}
		res.Outcome = OK
		q := m.queues[j.Queue]
		switch {
		case c.Declared && keep[j.ID]:
			m.cover(j, c.Session, now, c.LeaseNs, fx)
		case c.Declared && j.Status == Assigned:
			m.giveBack(q, j, c.Worker, ReasonWorkerLost, now, fx)
			continue
		case c.Declared || j.CancelAsked || j.RetryCount >= j.MaxRetries:
			m.loseAttempt(q, j, ReasonWorkerLost, now, fx)
			continue
		default:
			j.RetryCount++
			m.record(j, j.Status, j.Status, c.Worker, ReasonReoffered, now)
			m.cover(j, c.Session, now, c.LeaseNs, fx)
		}
		res.Jobs = append(res.Jobs, copyJob(j))
	}
	return res
}

// unsent gives back, uncounted, jobs a session leased but could not push
// (its stream was gone or replaced): nobody has them.
func (m *Machine) unsent(c *Unsent, now int64, fx *engine.Effects) *Result {
	if c.Worker == "" || c.Session == "" || len(c.JobIDs) == 0 || len(c.JobIDs) > MaxLeaseBatch {
		return fail(Invalid, "jobs: unsent needs a worker, a session and 1 to %d jobs", MaxLeaseBatch)
	}
	res := &Result{Outcome: Same}
	for _, id := range c.JobIDs {
		j := m.jobs[id]
		if j == nil || (j.Status != Assigned && j.Status != Running) || j.Worker != c.Worker || j.Session != c.Session {
			continue // given back already, or another session's now
		}
		m.giveBack(m.queues[j.Queue], j, c.Worker, ReasonNotDelivered, now, fx)
		res.Outcome = OK
		res.Jobs = append(res.Jobs, copyJob(j))
	}
	return res
}

func (m *Machine) report(c *Report, now int64, fx *engine.Effects) *Result {
	if len(c.Result) > MaxPayloadBytes {
		return fail(Exhausted, "jobs: result of %d bytes is over %d", len(c.Result), MaxPayloadBytes)
	}
	if len(c.Error) > MaxErrorLen {
		return fail(Invalid, "jobs: error message over %d bytes", MaxErrorLen)
	}
	j, res := m.held(c.JobID, c.Worker)
	if res != nil {
		return res
	}
	q := m.queues[j.Queue]
	q.Processed++
	q.DurationSum += now - j.StartedAt
	if !c.Success {
		q.Failures++
	}
	j.Result, j.Error = c.Result, c.Error
	m.endLease(j, fx)
	switch {
	case j.CancelAsked:
		m.deadLetter(q, j, c.Worker, ReasonCancelled, now, fx)
	case c.Success:
		m.move(q, j, Done, c.Worker, ReasonSucceeded, now)
		m.finish(q, j, now, fx)
	default:
		m.move(q, j, Failed, c.Worker, ReasonFailed, now)
		m.afterFailure(q, j, now, fx)
	}
	return &Result{Outcome: OK, Jobs: []*Job{copyJob(j)}}
}

// release gives a worker's leases back at once (one job, or all it holds
// in this partition): a worker that deregisters, drains or shuts down
// says it has stopped them, so nobody waits for the leases to run out.
// It is not counted as a retry: the worker reports a clean stop, not a
// crash the job may have caused (an expired lease is counted).
func (m *Machine) release(c *Release, now int64, fx *engine.Effects) *Result {
	var held []*Job
	if c.JobID != "" {
		j, res := m.held(c.JobID, c.Worker)
		if res != nil {
			return res
		}
		held = []*Job{j}
	} else {
		held = m.heldBy(c.Worker)
	}
	if len(held) == 0 {
		return &Result{Outcome: Same}
	}
	out := make([]*Job, 0, len(held))
	for _, j := range held {
		m.giveBack(m.queues[j.Queue], j, c.Worker, ReasonReleased, now, fx)
		out = append(out, copyJob(j))
	}
	return &Result{Outcome: OK, Jobs: out}
}

// giveBack ends a lease without counting a retry: the job goes back to
// PENDING (or, if cancelled meanwhile, to the dead letters).
func (m *Machine) giveBack(q *Queue, j *Job, worker, reason string, now int64, fx *engine.Effects) {
	m.endLease(j, fx)
	if j.CancelAsked {
		m.deadLetter(q, j, worker, ReasonCancelled, now, fx)
		return
	}
	m.move(q, j, Pending, worker, reason, now)
	m.makePending(q, j, now, fx)
}

// afterFailure schedules the retry of a FAILED job or dead-letters it.
func (m *Machine) afterFailure(q *Queue, j *Job, now int64, fx *engine.Effects) {
	if j.RetryCount >= j.MaxRetries {
		m.deadLetter(q, j, "", ReasonExhausted, now, fx)
		return
	}
	m.setTimer(fx, "retry/"+j.ID, addSat(now, Backoff(j.ID, j.RetryCount)), &RetryDue{JobID: j.ID})
}

// Backoff is the wait before retry n (from 0) of job id: min(5 s·2^n,
// 300 s) plus up to a quarter of that as jitter, so that jobs that failed
// together do not all return at once. The jitter is a hash of the id and
// n, not randomness: Apply must give the same timers in replay.
func Backoff(id string, n int32) int64 {
	d := backoffCapNs
	if n < 6 { // 5 s·2^6 is already over the cap
		d = min(backoffBaseNs<<n, backoffCapNs)
	}
	h := engine.HashMore(engine.Hash(id), strconv.Itoa(int(n)))
	return d + int64(h%uint64(d/4+1))
}

func (m *Machine) retryDue(c *RetryDue, now int64, fx *engine.Effects) *Result {
	j := m.jobs[c.JobID]
	if j == nil || j.Status != Failed {
		return fail(Same, "jobs: job %q no longer waits for a retry", c.JobID)
	}
	q := m.queues[j.Queue]
	j.RetryCount++
	m.move(q, j, Pending, "", ReasonRetry, now)
	m.makePending(q, j, now, fx)
	return &Result{Outcome: OK}
}

func (m *Machine) leaseExpired(c *LeaseExpired, now int64, fx *engine.Effects) *Result {
	j := m.jobs[c.JobID]
	if j == nil || (j.Status != Assigned && j.Status != Running) || j.LeaseUntil > now {
		return fail(Same, "jobs: job %q holds no expired lease", c.JobID)
	}
	m.loseAttempt(m.queues[j.Queue], j, ReasonLeaseExpired, now, fx)
	return &Result{Outcome: OK}
}

// loseAttempt ends a lease whose attempt was lost with its worker: it
// counts as a retry, or dead-letters the job when none is left.
func (m *Machine) loseAttempt(q *Queue, j *Job, reason string, now int64, fx *engine.Effects) {
	worker := j.Worker
	m.endLease(j, fx)
	switch {
	case j.CancelAsked:
		m.deadLetter(q, j, worker, ReasonCancelled, now, fx)
	case j.RetryCount >= j.MaxRetries:
		m.deadLetter(q, j, worker, reason, now, fx)
	default:
		j.RetryCount++
		m.move(q, j, Pending, worker, reason, now)
		m.makePending(q, j, now, fx)
	}
}

func (m *Machine) readyDue(c *ReadyDue, now int64, fx *engine.Effects) *Result {
	j := m.jobs[c.JobID]
	if j == nil || j.Status != Pending || j.heapIdx >= 0 {
		return fail(Same, "jobs: job %q is not waiting for its start time", c.JobID)
	}
	q := m.queues[j.Queue]
	q.ready[j.Priority].push(j)
	m.notifyReady(q, fx)
	return &Result{Outcome: OK}
}

func (m *Machine) ttlExpired(c *TTLExpired, now int64, fx *engine.Effects) *Result {
	j := m.jobs[c.JobID]
	if j == nil || j.Status != Pending {
		// Not pending now: makePending checks the TTL when it returns.
		return fail(Same, "jobs: job %q is not pending", c.JobID)
	}
	m.deadLetter(m.queues[j.Queue], j, "", ReasonTTL, now, fx)
	return &Result{Outcome: OK}
}

// --- cancel and retry ---

func (m *Machine) cancel(c *Cancel, now int64, fx *engine.Effects) *Result {
	j := m.jobs[c.JobID]
	if j == nil {
		return fail(NotFound, "jobs: no job %q", c.JobID)
	}
	q := m.queues[j.Queue]
	switch j.Status {
	case Pending:
		m.deadLetter(q, j, "", ReasonCancelled, now, fx)
	case Assigned:
		worker := j.Worker
		m.endLease(j, fx)
		m.deadLetter(q, j, worker, ReasonCancelled, now, fx)
		// The worker may already be starting it: tell it too.
		fx.Notify(CancelRequested{JobID: j.ID, Worker: worker})
	case Running:
		if j.CancelAsked {
			return &Result{Outcome: Same, Jobs: []*Job{copyJob(j)}}
		}
		j.CancelAsked = true
		m.record(j, Running, Running, j.Worker, ReasonCancelPending, now)
		fx.Notify(CancelRequested{JobID: j.ID, Worker: j.Worker})
	case Failed:
		// Waiting for its retry: cancel it like a pending job.
		fx.CancelTimer("retry/" + j.ID)
		m.deadLetter(q, j, "", ReasonCancelled, now, fx)
	default:
		return fail(Conflict, "jobs: job %q is already %s", j.ID, j.Status)
	}
	return &Result{Outcome: OK, Jobs: []*Job{copyJob(j)}}
}

func (m *Machine) retry(c *Retry, now int64, fx *engine.Effects) *Result {
	j := m.jobs[c.JobID]
	if j == nil {
		return fail(NotFound, "jobs: no job %q", c.JobID)
	}
	if j.Status != DeadLettered && j.Status != Failed {
		return fail(Conflict, "jobs: job %q is %s; only failed or dead-lettered jobs are retried", j.ID, j.Status)
	}
	q := m.queues[j.Queue]
	fx.CancelTimer("retry/" + j.ID)
	j.RetryCount, j.CancelAsked, j.DeadReason, j.purgeAt = 0, false, "", 0
	// A manual retry starts the TTL afresh: otherwise a job past its TTL
	// could never be retried.
	j.TTLFrom = now
	if j.TTLNs > 0 {
		m.setTimer(fx, "ttl/"+j.ID, addSat(now, j.TTLNs), &TTLExpired{JobID: j.ID})
	}
	m.move(q, j, Pending, "", ReasonManualRetry, now)
	m.makePending(q, j, now, fx)
	return &Result{Outcome: OK, Jobs: []*Job{copyJob(j)}}
}

// --- transitions ---

// move changes a job's status, keeps the queue's counts and records it.
func (m *Machine) move(q *Queue, j *Job, to Status, worker, reason string, now int64) {
	from := j.Status
	if !Allowed(from, to) {
		panic(fmt.Sprintf("jobs: transition %s → %s of %q", from, to, j.ID))
	}
	q.counts[from]--
	q.counts[to]++
	if from.Finished() {
		m.finished--
	}
	if to.Finished() {
		m.finished++
	}
	j.Status = to
	if to != Assigned && to != Running {
		j.Worker = ""
	}
	if to == Pending {
		j.StartedAt = 0
	}
	m.record(j, from, to, worker, reason, now)
}

// Allowed reports whether the state machine has the transition from → to.
func Allowed(from, to Status) bool {
	switch from {
	case Pending:
		return to == Assigned || to == DeadLettered
	case Assigned:
		return to == Running || to == Done || to == Failed || to == Pending || to == DeadLettered
	case Running:
		return to == Done || to == Failed || to == Pending || to == DeadLettered
	case Failed:
		return to == Pending || to == DeadLettered
	case DeadLettered:
		return to == Pending
	}
	return false
}

func (m *Machine) record(j *Job, from, to Status, worker, reason string, now int64) {
	j.nextEvent++
	if len(j.Events) >= MaxEventsPerJob {
		// Drop the oldest; a fork's view shares the old array but only
		// reads up to its own length, and the append below writes past it
		// or into a new array.
		j.Events = j.Events[len(j.Events)-MaxEventsPerJob+1:]
	}
	j.Events = append(j.Events, JobEvent{ID: j.nextEvent, From: from, To: to, Worker: worker, Reason: reason, At: now})
}

func (m *Machine) deadLetter(q *Queue, j *Job, worker, reason string, now int64, fx *engine.Effects) {
	if j.heapIdx >= 0 {
		q.ready[j.Priority].remove(j)
	}
	fx.CancelTimer("ready/" + j.ID)
	j.DeadReason = reason
	m.move(q, j, DeadLettered, worker, reason, now)
	m.finish(q, j, now, fx)
}

// finish ends a job: its timers go, it is queued for purging.
func (m *Machine) finish(q *Queue, j *Job, now int64, fx *engine.Effects) {
	j.CompletedAt = now
	fx.CancelTimer("ttl/" + j.ID)
	fx.Notify(JobEnded{JobID: j.ID, Queue: q.Name, Status: j.Status})
	ret := j.RetentionNs
	if ret == 0 {
		ret = DefaultRetentionNs
	}
	j.purgeAt = addSat(now, ret)
	if m.purgeQ.Push(purgeEntry{JobID: j.ID, At: j.purgeAt}) {
		m.setTimer(fx, purgeTimerID, j.purgeAt, &PurgeJobs{})
	}
	// Past the cap the oldest-ended job goes now. Entries of jobs that
	// are gone or live again are skipped, so this ends: j itself is in
	// the queue. The purge timer may then fire for an entry already
	// gone, and re-arms for the new head.
	for m.finished > m.opts.Limits.MaxFinished {
		e, ok := m.purgeQ.Pop()
		if !ok {
			break
		}
		if old := m.jobs[e.JobID]; old != nil && old.Status.Finished() && old.purgeAt == e.At {
			m.dropJob(old, fx)
		}
	}
}

// dropJob removes a job and everything that points to it.
func (m *Machine) dropJob(j *Job, fx *engine.Effects) {
	q := m.queues[j.Queue]
	if j.heapIdx >= 0 {
		q.ready[j.Priority].remove(j)
	}
	if j.Status == Assigned || j.Status == Running {
		m.endLease(j, fx)
	}
	for _, p := range [...]string{"ttl/", "ready/", "retry/"} {
		fx.CancelTimer(p + j.ID)
	}
	q.counts[j.Status]--
	q.jobs--
	if j.Status.Finished() {
		m.finished--
	}
	if j.IdemKey != "" && q.keys[j.IdemKey] == j.ID {
		delete(q.keys, j.IdemKey)
	}
	q.removeOrder(j)
	delete(m.jobs, j.ID)
}

// removeOrder leaves a hole where j was in q.order and compacts once
// half of it is holes, so removal costs O(1) amortized.
func (q *Queue) removeOrder(j *Job) {
	i := q.orderIndex(j.Seq)
	if i < 0 {
		panic("jobs: job missing from its queue's order")
	}
	q.order[i] = nil
	q.holes++
	if q.holes*2 >= len(q.order) {
		n := 0
		for _, x := range q.order {
			if x != nil {
				q.order[n] = x
				n++
			}
		}
		clear(q.order[n:])
		q.order = q.order[:n]
		q.holes = 0
	}
}

// orderIndex finds the job with seq in q.order, skipping holes: the
// live entries are in seq order, so binary search over positions works
// by looking at the nearest live entry.
func (q *Queue) orderIndex(seq uint64) int {
	lo, hi := 0, len(q.order)
	for lo < hi {
		mid := (lo + hi) / 2
		k := mid
		for k < hi && q.order[k] == nil {
			k++
		}
		if k == hi {
			hi = mid
			continue
		}
		switch s := q.order[k].Seq; {
		case s == seq:
			return k
		case s < seq:
			lo = k + 1
		default:
			hi = mid
		}
	}
	return -1
}

// --- retention ---

// Finished jobs are purged once the retention logged in their Submit has
// passed (never a setting of the process applying it, so replay purges
// the same jobs). As in commerce, one timer per partition serves a FIFO
// of finished jobs in the order they finished, instead of a timer per
// job. A manually retried job leaves a stale entry; purge skips entries
// whose job no longer ends at that time.
const (
	purgeTimerID      = "jobs/purge"
	maxPurgePerFiring = 4096
)

func (m *Machine) purge(now int64, fx *engine.Effects) *Result {
	n := m.purgeQ.PopDue(now, maxPurgePerFiring, func(e purgeEntry) {
		if j := m.jobs[e.JobID]; j != nil && j.Status.Finished() && j.purgeAt == e.At {
			m.dropJob(j, fx)
		}
	})
	if at, ok := m.purgeQ.Next(); ok {
		m.setTimer(fx, purgeTimerID, max(at, now), &PurgeJobs{})
	}
	return &Result{Outcome: OK, Msg: fmt.Sprintf("purged %d", n)}
}

// setTimer arms a timer whose command is this package's own and whose id
// is short (job ids are at most MaxIDLen), so SetTimer cannot refuse it.
func (m *Machine) setTimer(fx *engine.Effects, id string, at int64, cmd engine.Command) {
	if err := fx.SetTimer(id, at, cmd); err != nil {
		panic(err)
	}
}

func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// --- the ready heap ---

// jobHeap is a min-heap by submission seq of one priority's ready jobs;
// each job knows its index so a cancel or TTL removes it in O(log n).
type jobHeap []*Job

func (h *jobHeap) push(j *Job) {
	j.heapIdx = len(*h)
	*h = append(*h, j)
	h.up(j.heapIdx)
}

func (h *jobHeap) pop() *Job {
	j := (*h)[0]
	h.remove(j)
	return j
}

func (h *jobHeap) remove(j *Job) {
	s := *h
	i, last := j.heapIdx, len(s)-1
	if i != last {
		s[i] = s[last]
		s[i].heapIdx = i
	}
	s[last] = nil
	*h = s[:last]
	j.heapIdx = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].Seq <= h[i].Seq {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h jobHeap) down(i int) {
	for {
		l, small := 2*i+1, i
		if l < len(h) && h[l].Seq < h[small].Seq {
			small = l
		}
		if r := l + 1; r < len(h) && h[r].Seq < h[small].Seq {
			small = r
		}
		if small == i {
			return
		}
		h.swap(i, small)
		i = small
	}
}

func (h jobHeap) swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].heapIdx, h[k].heapIdx = i, k
}

// --- queries ---

// Queries (Machine.Query); each answer is a copy.
type (
	GetJob     struct{ ID string }   // → *Job or nil
	GetJobLogs struct{ ID string }   // → []JobEvent, nil if no such job
	ListQueues struct{}              // → []*Queue by name
	GetStats   struct{ Name string } // → *Stats or nil
	// WorkerJobs lists the ids of the jobs Worker holds a lease on here
	// (ASSIGNED or RUNNING), sorted.
	WorkerJobs struct{ Worker string } // → []string
	// ListJobs pages through a queue's jobs in submission order; Status 0
	// means any. PageToken is the NextPageToken of the previous page.
	ListJobs struct {
		Queue     string
		Status    Status
		Limit     int
		PageToken string
	}
)

// JobPage answers ListJobs; Found is false for an unknown queue or a bad
// page token (Msg says which).
type JobPage struct {
	Found         bool
	Msg           string
	Jobs          []*Job
	NextPageToken string
}

// Stats of a queue as GetQueueStats reports them.
type Stats struct {
	Queue                                                         string
	Pending, Assigned, Running, Failed, Done, DeadLettered, Total int64
	Processed                                                     int64
	AvgDurationMs, ErrorRate                                      float64
}

func (m *Machine) Query(q any) any {
	switch q := q.(type) {
	case GetJob:
		if j := m.jobs[q.ID]; j != nil {
			return viewJob(j)
		}
		return (*Job)(nil)
	case GetJobLogs:
		if j := m.jobs[q.ID]; j != nil {
			return append([]JobEvent{}, j.Events...)
		}
		return []JobEvent(nil)
	case ListQueues:
		names := make([]string, 0, len(m.queues))
		for n := range m.queues {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]*Queue, len(names))
		for i, n := range names {
			out[i] = copyQueue(m.queues[n])
		}
		return out
	case GetStats:
		qu := m.queues[q.Name]
		if qu == nil {
			return (*Stats)(nil)
		}
		return qu.stats()
	case ListJobs:
		return m.listJobs(q)
	case WorkerJobs:
		ids := make([]string, 0, len(m.leases[q.Worker]))
		for id := range m.leases[q.Worker] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return ids
	}
	return nil
}

func (q *Queue) stats() *Stats {
	s := &Stats{Queue: q.Name, Pending: q.counts[Pending], Assigned: q.counts[Assigned], Running: q.counts[Running],
		Failed: q.counts[Failed], Done: q.counts[Done], DeadLettered: q.counts[DeadLettered], Total: int64(q.jobs),
		Processed: q.Processed}
	if q.Processed > 0 {
		s.AvgDurationMs = float64(q.DurationSum) / float64(q.Processed) / 1e6
		s.ErrorRate = float64(q.Failures) / float64(q.Processed)
	}
	return s
}

func (m *Machine) listJobs(l ListJobs) *JobPage {
	q := m.queues[l.Queue]
	if q == nil {
		return &JobPage{Msg: fmt.Sprintf("jobs: no queue %q", l.Queue)}
	}
	limit := l.Limit
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, 100)
	var after uint64
	if l.PageToken != "" {
		v, err := strconv.ParseUint(l.PageToken, 10, 64)
		if err != nil {
			return &JobPage{Msg: "jobs: bad page token"}
		}
		after = v
	}
	// First live entry with seq > after (holes are skipped by scanning).
	i := sort.Search(len(q.order), func(i int) bool {
		for k := i; k < len(q.order); k++ {
			if q.order[k] != nil {
				return q.order[k].Seq > after
			}
		}
		return true
	})
	p := &JobPage{Found: true}
	bytes := 0
	for ; i < len(q.order); i++ {
		j := q.order[i]
		if j == nil || (l.Status != StatusUnspecified && j.Status != l.Status) {
			continue
		}
		n := len(j.Payload) + len(j.Result)
		if len(p.Jobs) == limit || (len(p.Jobs) > 0 && bytes+n > MaxListBytes) {
			p.NextPageToken = strconv.FormatUint(p.Jobs[len(p.Jobs)-1].Seq, 10)
			break
		}
		p.Jobs = append(p.Jobs, viewJob(j))
		bytes += n
	}
	return p
}

func copyJob(j *Job) *Job {
	c := *j
	c.Events = nil
	c.heapIdx = -1
	return &c
}

// viewJob is copyJob for readers: a job that ran and is not leased now
// shows the worker of its last attempt, as jq does (the state keeps a
// worker only on leased jobs).
func viewJob(j *Job) *Job {
	c := copyJob(j)
	if c.Worker == "" && c.Status != Pending {
		for i := len(j.Events) - 1; i >= 0; i-- {
			if w := j.Events[i].Worker; w != "" {
				c.Worker = w
				break
			}
		}
	}
	return c
}

func copyQueue(q *Queue) *Queue {
	return &Queue{Name: q.Name, MaxRetries: q.MaxRetries, TTLNs: q.TTLNs, CreatedAt: q.CreatedAt, Paused: q.Paused,
		Processed: q.Processed, Failures: q.Failures, DurationSum: q.DurationSum, counts: q.counts, jobs: q.jobs}
}

// WireTypes lists the queries, replies and notes that cross between nodes
// in cluster mode (engine.WireTypes).
func (w *Workload) WireTypes() []any {
	return []any{&Result{}, QueueReady{}, CancelRequested{}, JobEnded{},
		GetJob{}, GetJobLogs{}, ListQueues{}, GetStats{}, WorkerJobs{}, ListJobs{},
		&Job{}, []JobEvent{}, []*Queue{}, &Stats{}, &JobPage{}, []string{}}
}

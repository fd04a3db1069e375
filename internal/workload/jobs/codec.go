package jobs

import (
	"fmt"
	"sort"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
	"github.com/surge-run/surge/internal/wire"
)

// Command encoding, version 1: a tag byte, then the fields in order. Each
// type lists its fields once (code, over a wire.Coder), for both
// directions, so encoder and decoder cannot drift apart. Tags are logged:
// never reuse or renumber.
const (
	tagCreateQueue = 1 + iota
	tagDeleteQueue
	tagPauseQueue
	tagResumeQueue
	tagSubmit
	tagLease
	tagAck
	tagHeartbeat
	tagReport
	tagCancel
	tagRetry
	tagLeaseExpired
	tagRetryDue
	tagReadyDue
	tagTTLExpired
	tagPurgeJobs
	tagSubmitBatch
	tagRelease
	tagLeaseSession // Lease with the session that pushes the jobs
	tagExtend
	tagReclaim
	tagUnsent
	tagReportLease // Report that leases the worker's next job in the same entry
	tagSubmitLease
	tagSubmitBatchLease
	// The four submits with the partition's limit of payload bytes
	// (MaxHeldBytes) after their fields.
	tagSubmitHeld
	tagSubmitBatchHeld
	tagSubmitLeaseHeld
	tagSubmitBatchLeaseHeld
)

// Client commands. Times are absolute ns (NotBeforeNs) or durations in
// ns; the API fills in RetentionNs from its flag so that it is logged and
// replay purges what the live run purged.
type (
	CreateQueue struct {
		Name       string
		MaxRetries int32 // 0: DefaultMaxRetries
		TTLNs      int64 // 0: none
	}
	DeleteQueue struct {
		Name  string
		Force bool
	}
	PauseQueue  struct{ Name string }
	ResumeQueue struct{ Name string }
	// Submit is applied at QueueKey(Queue); JobID comes from NewJobID.
	Submit struct {
		JobID, Queue   string
		Payload        []byte
		Priority       int32
		MaxRetries     int32 // 0: the queue's
		TTLNs          int64 // 0: the queue's
		NotBeforeNs    int64
		IdempotencyKey string
		RetentionNs    int64 // 0: DefaultRetentionNs
		// MaxHeldBytes bounds the payload bytes of the partition's
		// unfinished jobs: a submit past it is refused. The API fills
		// it in from its limit so that it is logged and replay refuses
		// what the live run refused; 0 (records written before it): no
		// bound. Only a command's own counts, not its batch's jobs'.
		MaxHeldBytes int64
		// heldTag: decoded from a record with the limit.
		heldTag bool
	}
	// Lease takes up to Max ready jobs for Worker's stream Session for
	// LeaseNs.
	Lease struct {
		Queue, Worker string
		Max           int32
		LeaseNs       int64
		Session       string
		// legacy: decoded from a record written before sessions (tag
		// tagLease, no Session), so that it re-encodes to its own bytes.
		legacy bool
	}
	Ack struct{ JobID, Worker string }
	// Heartbeat extends every lease of Worker: logs written before
	// sessions hold it; the API sends Extend.
	Heartbeat struct {
		Worker  string
		LeaseNs int64
	}
	// Extend is a heartbeat of Worker: it extends by LeaseNs the leases
	// of the jobs JobIDs names if Declared (the worker listed what it
	// holds), else those of the live stream Session ("" extends none).
	Extend struct {
		Worker, Session string
		LeaseNs         int64
		Declared        bool
		JobIDs          []string
	}
	// Reclaim settles, as Worker's stream Session opens, the jobs older
	// sessions of the id hold: kept if Declared and in Keep, given back
	// if Declared and not, offered again on Session if not Declared.
	Reclaim struct {
		Worker, Session string
		LeaseNs         int64
		Declared        bool
		Keep            []string
	}
	// Unsent gives back the jobs Session leased but could not push.
	Unsent struct {
		Worker, Session string
		JobIDs          []string
	}
	// Report ends Worker's lease of JobID with its result. With Next > 0
	// it also leases up to Next ready jobs of the job's queue to the
	// stream Session for LeaseNs, if that stream holds the job: one log
	// entry and one fsync where a report and the stream's next lease took
	// two (tagReportLease; a plain report keeps tagReport's bytes).
	Report struct {
		JobID, Worker string
		Success       bool
		Result        []byte
		Error         string
		Session       string
		Next          int32
		LeaseNs       int64
		// leasing: coded with tagReportLease (decoded from one, or Next > 0).
		leasing bool
	}
	Cancel struct{ JobID string }
	Retry  struct{ JobID string }
	// Release gives back Worker's lease of JobID, or of all its jobs in
	// the partition if JobID is empty.
	Release struct{ Worker, JobID string }
	// SubmitBatch submits jobs of one queue in one command.
	SubmitBatch struct {
		Jobs         []Submit
		MaxHeldBytes int64 // as Submit's, for the whole batch
		heldTag      bool
	}
	// SubmitLease submits a job and then leases up to Next ready jobs of
	// its queue, by priority, to Worker's stream Session for LeaseNs: a
	// stream waiting with a free slot gets its job once this one entry is
	// durable, where the submit and then the stream's lease took two.
	SubmitLease struct {
		Submit
		Worker, Session string
		Next            int32
		LeaseNs         int64
	}
	// SubmitBatchLease is SubmitBatch, then the same lease as SubmitLease.
	SubmitBatchLease struct {
		SubmitBatch
		Worker, Session string
		Next            int32
		LeaseNs         int64
	}
)

// Timer commands; Apply refuses them from anywhere but a timer.
type (
	LeaseExpired struct{ JobID string }
	RetryDue     struct{ JobID string }
	ReadyDue     struct{ JobID string }
	TTLExpired   struct{ JobID string }
	PurgeJobs    struct{}
)

type timerCommand interface{ timerCommand() }

func (*LeaseExpired) timerCommand() {}
func (*RetryDue) timerCommand()     {}
func (*ReadyDue) timerCommand()     {}
func (*TTLExpired) timerCommand()   {}
func (*PurgeJobs) timerCommand()    {}

func (x *CreateQueue) code(c *wire.Coder) { c.Str(&x.Name); c.I32(&x.MaxRetries); c.I64(&x.TTLNs) }
func (x *DeleteQueue) code(c *wire.Coder) { c.Str(&x.Name); c.Bool(&x.Force) }
func (x *PauseQueue) code(c *wire.Coder)  { c.Str(&x.Name) }
func (x *ResumeQueue) code(c *wire.Coder) { c.Str(&x.Name) }
func (x *Submit) code(c *wire.Coder) {
	x.fields(c)
	if x.held() {
		c.I64(&x.MaxHeldBytes)
	}
}

// held tells whether the command is coded with its limit.
func (x *Submit) held() bool      { return x.heldTag || x.MaxHeldBytes > 0 }
func (x *SubmitBatch) held() bool { return x.heldTag || x.MaxHeldBytes > 0 }

// fields are a Submit's own, also each job's in a batch.
func (x *Submit) fields(c *wire.Coder) {
	c.Str(&x.JobID, &x.Queue)
	c.Bytes(&x.Payload)
	c.I32(&x.Priority, &x.MaxRetries)
	c.I64(&x.TTLNs, &x.NotBeforeNs)
	c.Str(&x.IdempotencyKey)
	c.I64(&x.RetentionNs)
}
func (x *Lease) code(c *wire.Coder) {
	c.Str(&x.Queue, &x.Worker)
	c.I32(&x.Max)
	c.I64(&x.LeaseNs)
	if !x.legacy {
		c.Str(&x.Session)
	}
}
func (x *Ack) code(c *wire.Coder)       { c.Str(&x.JobID, &x.Worker) }
func (x *Heartbeat) code(c *wire.Coder) { c.Str(&x.Worker); c.I64(&x.LeaseNs) }
func (x *Report) code(c *wire.Coder) {
	c.Str(&x.JobID, &x.Worker)
	c.Bool(&x.Success)
	c.Bytes(&x.Result)
	c.Str(&x.Error)
	if !x.leases() {
		return
	}
	c.Str(&x.Session)
	c.I32(&x.Next)
	c.I64(&x.LeaseNs)
}
func (x *SubmitBatch) code(c *wire.Coder) {
	n := c.Count(len(x.Jobs), 9) // an empty Submit takes 9 bytes
	if c.Reading() {
		x.Jobs = make([]Submit, n)
	}
	for i := range x.Jobs {
		x.Jobs[i].fields(c)
	}
	if x.held() {
		c.I64(&x.MaxHeldBytes)
	}
}
func (x *Release) code(c *wire.Coder) { c.Str(&x.Worker, &x.JobID) }
func (x *SubmitBatchLease) code(c *wire.Coder) {
	x.SubmitBatch.code(c)
	c.Str(&x.Worker, &x.Session)
	c.I32(&x.Next)
	c.I64(&x.LeaseNs)
}
func (x *SubmitLease) code(c *wire.Coder) {
	x.Submit.code(c)
	c.Str(&x.Worker, &x.Session)
	c.I32(&x.Next)
	c.I64(&x.LeaseNs)
}
func (x *Extend) code(c *wire.Coder) {
	c.Str(&x.Worker, &x.Session)
	c.I64(&x.LeaseNs)
	c.Bool(&x.Declared)
	c.Strs(&x.JobIDs)
}
func (x *Reclaim) code(c *wire.Coder) {
	c.Str(&x.Worker, &x.Session)
	c.I64(&x.LeaseNs)
	c.Bool(&x.Declared)
	c.Strs(&x.Keep)
}
func (x *Unsent) code(c *wire.Coder)       { c.Str(&x.Worker, &x.Session); c.Strs(&x.JobIDs) }
func (x *Cancel) code(c *wire.Coder)       { c.Str(&x.JobID) }
func (x *Retry) code(c *wire.Coder)        { c.Str(&x.JobID) }
func (x *LeaseExpired) code(c *wire.Coder) { c.Str(&x.JobID) }
func (x *RetryDue) code(c *wire.Coder)     { c.Str(&x.JobID) }
func (x *ReadyDue) code(c *wire.Coder)     { c.Str(&x.JobID) }
func (x *TTLExpired) code(c *wire.Coder)   { c.Str(&x.JobID) }
func (x *PurgeJobs) code(c *wire.Coder)    {}

type coded interface {
	engine.Command
	code(c *wire.Coder)
}

// encode is each AppendBinary: inlined there, its call of code is
// direct, and the writer stays on the stack.
func encode(b []byte, tag byte, x coded) ([]byte, error) {
	w := wire.Writer{B: append(b, tag)}
	x.code(&wire.Coder{W: &w})
	return w.B, nil
}

func (x *CreateQueue) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagCreateQueue, x) }
func (x *DeleteQueue) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagDeleteQueue, x) }
func (x *PauseQueue) AppendBinary(b []byte) ([]byte, error)  { return encode(b, tagPauseQueue, x) }
func (x *ResumeQueue) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagResumeQueue, x) }
func (x *Submit) AppendBinary(b []byte) ([]byte, error) {
	if x.held() {
		return encode(b, tagSubmitHeld, x)
	}
	return encode(b, tagSubmit, x)
}
func (x *Lease) AppendBinary(b []byte) ([]byte, error) {
	if x.legacy {
		return encode(b, tagLease, x)
	}
	return encode(b, tagLeaseSession, x)
}
func (x *Ack) AppendBinary(b []byte) ([]byte, error)       { return encode(b, tagAck, x) }
func (x *Heartbeat) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagHeartbeat, x) }
func (x *Report) AppendBinary(b []byte) ([]byte, error) {
	if x.leases() {
		return encode(b, tagReportLease, x)
	}
	return encode(b, tagReport, x)
}

// leases tells whether the report is coded with its next lease.
func (x *Report) leases() bool                                { return x.leasing || x.Next > 0 }
func (x *Cancel) AppendBinary(b []byte) ([]byte, error)       { return encode(b, tagCancel, x) }
func (x *Retry) AppendBinary(b []byte) ([]byte, error)        { return encode(b, tagRetry, x) }
func (x *LeaseExpired) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagLeaseExpired, x) }
func (x *RetryDue) AppendBinary(b []byte) ([]byte, error)     { return encode(b, tagRetryDue, x) }
func (x *ReadyDue) AppendBinary(b []byte) ([]byte, error)     { return encode(b, tagReadyDue, x) }
func (x *TTLExpired) AppendBinary(b []byte) ([]byte, error)   { return encode(b, tagTTLExpired, x) }
func (x *PurgeJobs) AppendBinary(b []byte) ([]byte, error)    { return encode(b, tagPurgeJobs, x) }
func (x *SubmitBatch) AppendBinary(b []byte) ([]byte, error) {
	if x.held() {
		return encode(b, tagSubmitBatchHeld, x)
	}
	return encode(b, tagSubmitBatch, x)
}
func (x *Release) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagRelease, x) }
func (x *SubmitLease) AppendBinary(b []byte) ([]byte, error) {
	if x.held() {
		return encode(b, tagSubmitLeaseHeld, x)
	}
	return encode(b, tagSubmitLease, x)
}
func (x *SubmitBatchLease) AppendBinary(b []byte) ([]byte, error) {
	if x.held() {
		return encode(b, tagSubmitBatchLeaseHeld, x)
	}
	return encode(b, tagSubmitBatchLease, x)
}
func (x *Extend) AppendBinary(b []byte) ([]byte, error)  { return encode(b, tagExtend, x) }
func (x *Reclaim) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagReclaim, x) }
func (x *Unsent) AppendBinary(b []byte) ([]byte, error)  { return encode(b, tagUnsent, x) }

func newCommand(tag byte) coded {
	switch tag {
	case tagCreateQueue:
		return &CreateQueue{}
	case tagDeleteQueue:
		return &DeleteQueue{}
	case tagPauseQueue:
		return &PauseQueue{}
	case tagResumeQueue:
		return &ResumeQueue{}
	case tagSubmit:
		return &Submit{}
	case tagLease:
		return &Lease{legacy: true}
	case tagLeaseSession:
		return &Lease{}
	case tagAck:
		return &Ack{}
	case tagHeartbeat:
		return &Heartbeat{}
	case tagReport:
		return &Report{}
	case tagCancel:
		return &Cancel{}
	case tagRetry:
		return &Retry{}
	case tagLeaseExpired:
		return &LeaseExpired{}
	case tagRetryDue:
		return &RetryDue{}
	case tagReadyDue:
		return &ReadyDue{}
	case tagTTLExpired:
		return &TTLExpired{}
	case tagPurgeJobs:
		return &PurgeJobs{}
	case tagSubmitBatch:
		return &SubmitBatch{}
	case tagRelease:
		return &Release{}
	case tagExtend:
		return &Extend{}
	case tagReclaim:
		return &Reclaim{}
	case tagUnsent:
		return &Unsent{}
	case tagReportLease:
		return &Report{leasing: true}
	case tagSubmitLease:
		return &SubmitLease{}
	case tagSubmitBatchLease:
		return &SubmitBatchLease{}
	case tagSubmitHeld:
		return &Submit{heldTag: true}
	case tagSubmitBatchHeld:
		return &SubmitBatch{heldTag: true}
	case tagSubmitLeaseHeld:
		return &SubmitLease{Submit: Submit{heldTag: true}}
	case tagSubmitBatchLeaseHeld:
		return &SubmitBatchLease{SubmitBatch: SubmitBatch{heldTag: true}}
	}
	return nil
}

// Decode implements engine.Machine. The machine decodes with a decoder of its own (the engine calls it from
// one goroutine at a time), which saves two allocations per command.
func (m *Machine) Decode(data []byte) (engine.Command, error) { return decodeWith(&m.dec, data) }

// Canonical implements engine.Canonical for a single Submit, the one
// command a unary submit sends: every field is encoded, and decoded as
// it was (TestSubmitIsCanonical), and the API hands each call a Submit
// of its own whose id, key and payload nothing else writes. The decode
// copied the id and payload (and the queue's name and the key) only for
// a job kept as a record to copy them again.
func (m *Machine) Canonical(cmd engine.Command) bool {
	_, ok := cmd.(*Submit)
	return ok
}

// Decode needs no state. Trailing bytes are an error: a record that
// decodes from a prefix of itself is not what was written.
func Decode(data []byte) (engine.Command, error) { return decodeWith(new(wire.Decoder), data) }

func decodeWith(d *wire.Decoder, data []byte) (engine.Command, error) {
	cmd, err := wire.DecodeCommandWith(d, wire.Reader{B: data}, newCommand, coded.code)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	return cmd, nil
}

// Snapshot encoding: the sequence counter; the queues by name, each with
// its jobs in submission order; the purge queue in queue order. Counts,
// ready heaps, idempotency keys, the submission order and the worker
// lease index are derived and rebuilt on Restore, so the same state
// always encodes to the same bytes whatever its history. Version 2 adds
// each job's lease session after its worker; Restore still reads version
// 1 (no sessions: leases from before them).
const (
	snapshotVersion   = 2
	snapshotVersionV1 = 1
)

func (x *Queue) code(c *wire.Coder) {
	c.Str(&x.Name)
	c.I32(&x.MaxRetries)
	c.I64(&x.TTLNs, &x.CreatedAt)
	c.Bool(&x.Paused)
	c.I64(&x.Processed, &x.Failures, &x.DurationSum)
}

// code codes a job in snapshot version c.Version.
func (x *Job) code(c *wire.Coder) {
	c.Str(&x.ID)
	c.Bytes(&x.Payload)
	st := int64(x.Status)
	c.I64(&st)
	if c.Reading() {
		x.Status = Status(st)
	}
	c.I32(&x.Priority, &x.MaxRetries, &x.RetryCount)
	c.I64(&x.CreatedAt, &x.StartedAt, &x.CompletedAt)
	c.Str(&x.Worker)
	if c.Version >= 2 {
		c.Str(&x.Session)
	}
	c.Bytes(&x.Result)
	c.I64(&x.NotBefore)
	c.Str(&x.Error)
	c.I64(&x.TTLNs, &x.TTLFrom, &x.RetentionNs)
	c.Str(&x.IdemKey)
	c.I64(&x.LeaseUntil)
	c.Bool(&x.CancelAsked)
	c.Str(&x.DeadReason)
	c.U64(&x.Seq)
	c.I64(&x.nextEvent, &x.purgeAt)
	inHeap := x.heapIdx >= 0
	c.Bool(&inHeap)
	if c.Reading() {
		x.heapIdx = -1
		if inHeap {
			x.heapIdx = 0 // Restore pushes it
		}
	}
	n := c.Count(len(x.Events), 6)
	if c.Reading() {
		if n <= cap(x.Events) {
			x.Events = x.Events[:n] // the room a newJob has for one
		} else {
			x.Events = make([]JobEvent, n)
		}
	}
	for i := range x.Events {
		e := &x.Events[i]
		from, to := int64(e.From), int64(e.To)
		c.I64(&e.ID, &from, &to)
		if c.Reading() {
			// Only when decoding: a fork shares its events' backing arrays
			// with the live machine and with any other fork being encoded.
			e.From, e.To = Status(from), Status(to)
		}
		c.Str(&e.Worker, &e.Reason)
		c.I64(&e.At)
	}
}

// AppendSnapshot implements engine.Machine.
func (m *Machine) AppendSnapshot(dst []byte) []byte {
	names := make([]string, 0, len(m.queues))
	for n := range m.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	w := wire.Writer{B: dst}
	c := &wire.Coder{W: &w, Version: snapshotVersion}
	c.U64(&c.Version)
	c.U64(&m.seq)
	c.Count(len(names), 1)
	for _, n := range names {
		q := m.queues[n]
		q.code(c)
		c.Count(q.jobs, 1)
		for _, r := range q.order {
			switch {
			case r.j != nil:
				r.j.code(c)
			case r.cached:
				w.B = append(w.B, m.forkEnc[r.rec.off]...)
			case r.seq != 0 && r.status == Pending:
				w.B = append(w.B, jobBytes(m.pend.rec(r.rec))...)
			case r.seq != 0:
				// An ended job's record holds its encoding as it is.
				w.B = append(w.B, jobBytes(m.ended.rec(r.rec))...)
			}
		}
	}
	c.Count(m.purgeQ.Len(), 2)
	for e := range m.purgeQ.All() {
		id := e.key.id()
		c.Str(&id)
		c.I64(&e.At)
	}
	return w.B
}

// Restore implements engine.Machine. It checks what Apply relies on, so
// a damaged snapshot is an error here, not a panic later.
func (m *Machine) Restore(data []byte) error {
	m.reset()
	if err := m.restore(data); err != nil {
		m.reset()
		return fmt.Errorf("jobs: restoring snapshot: %w", err)
	}
	return nil
}

func (m *Machine) restore(data []byte) error {
	r := wire.Reader{B: data}
	c := &wire.Coder{R: &r}
	c.U64(&c.Version)
	if v := c.Version; r.Err == nil && v != snapshotVersion && v != snapshotVersionV1 {
		return fmt.Errorf("version %d, this build reads %d and %d", v, snapshotVersionV1, snapshotVersion)
	}
	clear(m.queues)
	c.U64(&m.seq)
	for nq := c.Count(0, 8); nq > 0 && r.Err == nil; nq-- {
		q := newQueue("", 0, 0, 0)
		q.code(c)
		if r.Err != nil {
			break
		}
		if m.queues[q.Name] != nil {
			return fmt.Errorf("queue %q twice", q.Name)
		}
		m.queues[q.Name] = q
		var last uint64
		for nj := c.Count(0, 20); nj > 0 && r.Err == nil; nj-- {
			j := allocJob(Job{Queue: q.Name})
			j.code(c)
			if r.Err != nil {
				break
			}
			if err := m.checkJob(j, last); err != nil {
				return err
			}
			last = j.Seq
			m.jobs[j.ID] = j
			m.payloads += int64(len(j.Payload))
			q.jobs++
			q.order = append(q.order, jobRef{j: j, seq: j.Seq})
			q.counts[j.Status]++
			if j.Status.Finished() {
				m.finished++
				m.toEnd = append(m.toEnd, j)
			}
			if j.IdemKey != "" {
				if _, dup := q.keys[j.IdemKey]; dup {
					return fmt.Errorf("idempotency key %q twice", j.IdemKey)
				}
				q.keys[j.IdemKey] = j.ID
			}
			if j.heapIdx >= 0 {
				q.ready[j.Priority].push(j)
			}
			if j.Status == Assigned || j.Status == Running {
				m.addLease(j)
			}
		}
	}
	for n := c.Count(0, 2); n > 0 && r.Err == nil; n-- {
		var id string
		var e purgeEntry
		c.Str(&id)
		c.I64(&e.At)
		e.key = keyOf(id)
		m.purgeQ.Push(e)
	}
	if r.Err == nil && len(r.B) > 0 {
		return fmt.Errorf("%d bytes after the snapshot", len(r.B))
	}
	if r.Err == nil {
		m.endFinished()
	}
	return r.Err
}

func (m *Machine) checkJob(j *Job, lastSeq uint64) error {
	switch {
	case j.ID == "" || m.jobs[j.ID] != nil:
		return fmt.Errorf("job id %q empty or twice", j.ID)
	case j.Status == StatusUnspecified || j.Status >= numStatuses:
		return fmt.Errorf("job %q has status %d", j.ID, j.Status)
	case j.Priority < 0 || j.Priority > MaxPriority:
		return fmt.Errorf("job %q has priority %d", j.ID, j.Priority)
	case j.Seq <= lastSeq || j.Seq > m.seq:
		return fmt.Errorf("job %q out of submission order", j.ID)
	case j.heapIdx >= 0 && j.Status != Pending:
		return fmt.Errorf("job %q is ready but %s", j.ID, j.Status)
	case (j.Status == Assigned || j.Status == Running) != (j.Worker != ""):
		return fmt.Errorf("job %q is %s with worker %q", j.ID, j.Status, j.Worker)
	case j.Session != "" && j.Worker == "":
		return fmt.Errorf("job %q has a lease session but no worker", j.ID)
	case len(j.Events) > MaxEventsPerJob:
		return fmt.Errorf("job %q has %d events", j.ID, len(j.Events))
	}
	return nil
}

// ForkSnapshot implements engine.SnapshotForker: it copies the queues
// and jobs (not their payloads, results or events, which the partition
// never changes in place: it replaces them, and an event log only grows
// past the length the copy holds) and encodes later, off the partition.
func (m *Machine) ForkSnapshot() func(dst []byte) []byte {
	f := &Machine{opts: m.opts, queues: make(map[string]*Queue, len(m.queues)), seq: m.seq,
		purgeQ: m.purgeQ.View(), ended: m.ended.view(), pend: m.pend.view(), forkEnc: make([][]byte, 0, len(m.jobs))}
	size := m.purgeQ.Len() * (snapPurgeBytes + ids.Len)
	for n, q := range m.queues {
		size += snapQueueBytes + len(n)
		c := *q
		c.ready = [MaxPriority + 1]jobHeap{}
		c.keys = nil
		c.order = make([]jobRef, 0, q.jobs)
		// The copies go in chunks that never move (the order points
		// into them), made as needed: most pending jobs need none.
		var vals []Job
		for _, r := range q.order {
			switch {
			case r.j != nil:
				if enc := r.j.snapEncoding(); enc != nil {
					r = jobRef{seq: r.seq, cached: true, rec: recLoc{off: uint32(len(f.forkEnc))}}
					f.forkEnc = append(f.forkEnc, enc)
					size += len(enc)
					break
				}
				if len(vals) == cap(vals) {
					vals = make([]Job, 0, forkChunkJobs)
				}
				vals = append(vals, *r.j)
				r.j = &vals[len(vals)-1]
				size += r.j.snapshotBytes()
			case r.seq != 0:
				// Records are never written again: the fork shares them.
				size += int(r.rec.n)
			default:
				continue
			}
			c.order = append(c.order, r)
		}
		c.holes = 0
		f.queues[n] = &c
	}
	m.snapshotHint = size
	return f.AppendSnapshot
}

// forkChunkJobs is how many jobs a fork copies into one allocation.
const forkChunkJobs = 256

// Estimates of the encoded sizes (AppendSnapshot) of a queue's, a job's,
// an event's and a purge entry's fields besides their strings: varints
// of times since 1970 in ns take 9 bytes, most others one or two.
const (
	snapQueueBytes = 64
	snapJobBytes   = 80
	snapEventBytes = 24
	snapPurgeBytes = 12
)

// snapshotBytes estimates what j adds to a snapshot.
func (j *Job) snapshotBytes() int {
	n := snapJobBytes + len(j.ID) + len(j.Payload) + len(j.Worker) + len(j.Session) + len(j.Result) +
		len(j.Error) + len(j.IdemKey) + len(j.DeadReason)
	for i := range j.Events {
		n += snapEventBytes + len(j.Events[i].Worker) + len(j.Events[i].Reason)
	}
	return n
}

// SnapshotSizeHint implements engine.SnapshotSizeHinter with the size
// the last ForkSnapshot estimated while it copied the jobs (the engine
// asks right after forking): encoding a state that grew since its last
// snapshot into a buffer sized from that one grew the buffer by copies,
// a twentieth of the bytes a unary SubmitJob allocated in the jobs bench.
func (m *Machine) SnapshotSizeHint() int { return m.snapshotHint }

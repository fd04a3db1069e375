package jobs

import (
	"strconv"

	"github.com/surge-run/surge/internal/engine"
)

func (m *Machine) submit(c *Submit, now int64, fx *engine.Effects) *Result {
	q := m.queues[c.Queue]
	if q == nil {
		return fail(NotFound, "jobs: no queue %q", c.Queue)
	}
	if res := m.checkSubmit(q, c); res != nil {
		return res
	}
	if q.unfinished() >= m.opts.Limits.MaxJobsPerQueue {
		return full("jobs: queue %q holds %d unfinished jobs, its limit", q.Name, q.unfinished())
	}
	if res := m.checkHeld(int64(len(c.Payload)), c.MaxHeldBytes); res != nil {
		return res
	}
	return m.addJob(q, c, now, fx)
}

// checkHeld refuses payloads of n bytes more when the partition's jobs'
// payloads would pass limit (0: none).
func (m *Machine) checkHeld(n, limit int64) *Result {
	if limit > 0 && m.payloads+n > limit {
		r := full("jobs: this partition's unfinished jobs hold %d bytes of payloads; %d more would pass its limit of %d, freed as jobs finish",
			m.payloads, n, limit)
		r.Later = n <= limit
		return r
	}
	return nil
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
			return &Result{Outcome: Same, Jobs: []*Job{copyJob(m.job(id))}}
		}
	}
	if k := keyOf(c.JobID); m.jobs[c.JobID] != nil || m.hasPending(k) || m.hasEnded(k) {
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
	nj := m.spare
	if nj == nil {
		nj = new(newJob)
	}
	m.spare = nil
	j := nj.reset(Job{ID: c.JobID, Queue: q.Name, Payload: c.Payload, Priority: c.Priority, MaxRetries: mr, Status: Pending,
		CreatedAt: now, TTLFrom: now, NotBefore: c.NotBeforeNs, TTLNs: ttl, RetentionNs: c.RetentionNs,
		IdemKey: c.IdempotencyKey, Seq: m.seq, heapIdx: -1})
	m.payloads += int64(len(j.Payload))
	m.keepTrace(j.ID)
	q.jobs++
	if j.IdemKey != "" {
		q.keys[j.IdemKey] = j.ID
	}
	q.counts[Pending]++
	m.record(j, StatusUnspecified, Pending, "", ReasonSubmitted, now)
	if ttl > 0 {
		m.setTimer(fx, "ttl/"+j.ID, addSat(now, ttl), &TTLExpired{JobID: j.ID})
	}
	if m.keepPending(q, j, now) {
		m.notifyReady(q, fx) // as makePending does once it has pushed j
		res := createdReply(j)
		// Nothing points to j now: its record is what is kept.
		m.spare = nj
		return res
	}
	m.jobs[j.ID] = j
	q.order = append(q.order, jobRef{j: j, seq: j.Seq})
	m.makePending(q, j, now, fx)
	return createdReply(j)
}

// newJob is a new job and room for its first event, in one allocation:
// a pending job is one heap object fewer for the collector to mark (the
// jobs bench's unary run piles up 100,000 of them). A second event
// moves the events to an array of their own, as any append would.
type newJob struct {
	Job
	first [1]JobEvent
}

// allocJob is j in a newJob, its events slice holding the room.
func allocJob(j Job) *Job { return new(newJob).reset(j) }

// reset makes b hold j, its events slice holding the room.
func (b *newJob) reset(j Job) *Job {
	*b = newJob{Job: j}
	b.Events = b.first[:0]
	return &b.Job
}

// created is a submit's reply in one allocation: every submit makes one,
// and the result, its slice and the job's copy were three.
type created struct {
	res  Result
	jobs [1]*Job
	job  Job
}

// createdReply is the Created result of a new job j, holding a copy of it.
func createdReply(j *Job) *Result {
	c := &created{job: *j}
	c.job.Events, c.job.heapIdx = nil, -1
	c.jobs[0] = &c.job
	c.res = Result{Outcome: Created, Jobs: c.jobs[:]}
	return &c.res
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
		r := full("jobs: queue %q holds %d unfinished jobs; %d more would pass its limit of %d (nothing was submitted)",
			q.Name, q.unfinished(), adds, m.opts.Limits.MaxJobsPerQueue)
		r.Later = adds <= m.opts.Limits.MaxJobsPerQueue
		return r
	}
	bytes := int64(0)
	for i, r := range res.Each {
		if r == nil {
			bytes += int64(len(c.Jobs[i].Payload))
		}
	}
	if r := m.checkHeld(bytes, c.MaxHeldBytes); r != nil {
		r.Msg += " (nothing was submitted)"
		return r
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
	var traces map[string]engine.TraceContext
	for p := MaxPriority; p >= 0 && len(out) < int(c.Max); p-- {
		h := &q.ready[p]
		for len(out) < int(c.Max) {
			j := m.popReady(h)
			if j == nil {
				break
			}
			m.move(q, j, Assigned, c.Worker, ReasonLeased, now)
			j.Worker, j.Session = c.Worker, c.Session
			// jq's workers never ack, so the attempt starts at the lease;
			// an ack moves it to when the worker really started.
			j.StartedAt = now
			j.LeaseUntil = addSat(now, c.LeaseNs)
			m.addLease(j)
			m.setTimer(fx, "lease/"+j.ID, j.LeaseUntil, &LeaseExpired{JobID: j.ID})
			out = append(out, copyJob(j))
			traces = m.traceDispatch(traces, j.ID, fx)
		}
	}
	if len(out) == 0 {
		return &Result{Outcome: Same}
	}
	return &Result{Outcome: OK, Jobs: out, Traces: traces}
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

// submitLease submits, then leases for the stream that waits; the queue
// is noted ready only if jobs are left for other streams.
func (m *Machine) submitLease(c *SubmitLease, now int64, fx *engine.Effects) *Result {
	m.holdNotes = true
	res := m.submit(&c.Submit, now, fx)
	m.holdNotes = false
	return m.leaseAfterSubmit(res, c.Queue, &Lease{Queue: c.Queue, Worker: c.Worker, Max: c.Next, LeaseNs: c.LeaseNs, Session: c.Session}, now, fx)
}

func (m *Machine) submitBatchLease(c *SubmitBatchLease, now int64, fx *engine.Effects) *Result {
	m.holdNotes = true
	res := m.submitBatch(&c.SubmitBatch, now, fx)
	m.holdNotes = false
	if len(c.Jobs) == 0 {
		return res
	}
	q := c.Jobs[0].Queue
	return m.leaseAfterSubmit(res, q, &Lease{Queue: q, Worker: c.Worker, Max: c.Next, LeaseNs: c.LeaseNs, Session: c.Session}, now, fx)
}

// leaseAfterSubmit leases for the waiting stream once the submit res
// created jobs, and notes the queue ready if jobs are left for others.
func (m *Machine) leaseAfterSubmit(res *Result, queue string, l *Lease, now int64, fx *engine.Effects) *Result {
	if res.Outcome != Created {
		return res
	}
	next := m.lease(l, now, fx)
	if next.Outcome == OK {
		res.Next, res.Traces = next.Jobs, next.Traces
	}
	m.notifyReady(m.queues[queue], fx)
	return res
}

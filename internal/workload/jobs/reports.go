package jobs

import (
	"sort"
	"strconv"

	"github.com/surge-run/surge/internal/engine"
)

// held finds a job the worker holds a lease on.
func (m *Machine) held(id, worker string) (*Job, *Result) {
	j := m.liveJob(id)
	if j == nil {
		if e, ok := m.ended.get(keyOf(id)); ok {
			return nil, fail(Conflict, "jobs: job %q is %s, not leased to %q", id, e.status, worker)
		}
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
			// Offered again: a dispatch of its trace, as a lease is.
			res.Traces = m.traceDispatch(res.Traces, j.ID, fx)
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
		j := m.liveJob(id)
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
	// The next lease needs the stream that holds the job: the session
	// ends with the lease.
	sameStream := c.Session != "" && j.Session == c.Session
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
	res = &Result{Outcome: OK, Jobs: []*Job{copyJob(j)}}
	if c.Next > 0 && sameStream {
		next := m.lease(&Lease{Queue: q.Name, Worker: c.Worker, Max: c.Next, LeaseNs: c.LeaseNs, Session: c.Session}, now, fx)
		if next.Outcome == OK {
			res.Next, res.Traces = next.Jobs, next.Traces
		}
	}
	return res
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
	j := m.liveJob(c.JobID)
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
	j := m.liveJob(c.JobID)
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
	j := m.liveJob(c.JobID)
	if j == nil || j.Status != Pending || j.heapIdx >= 0 {
		return fail(Same, "jobs: job %q is not waiting for its start time", c.JobID)
	}
	q := m.queues[j.Queue]
	q.ready[j.Priority].push(j)
	m.notifyReady(q, fx)
	return &Result{Outcome: OK}
}

func (m *Machine) ttlExpired(c *TTLExpired, now int64, fx *engine.Effects) *Result {
	j := m.liveJob(c.JobID)
	if j == nil || j.Status != Pending {
		// Not pending now: makePending checks the TTL when it returns.
		return fail(Same, "jobs: job %q is not pending", c.JobID)
	}
	m.deadLetter(m.queues[j.Queue], j, "", ReasonTTL, now, fx)
	return &Result{Outcome: OK}
}

package jobs

import "github.com/surge-run/surge/internal/engine"

func (m *Machine) cancel(c *Cancel, now int64, fx *engine.Effects) *Result {
	j := m.liveJob(c.JobID)
	if j == nil {
		if e, ok := m.ended.get(keyOf(c.JobID)); ok {
			return fail(Conflict, "jobs: job %q is already %s", c.JobID, e.status)
		}
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
	j := m.liveJob(c.JobID)
	if j == nil {
		k := keyOf(c.JobID)
		e, ok := m.ended.get(k)
		switch {
		case !ok:
			return fail(NotFound, "jobs: no job %q", c.JobID)
		case e.status != DeadLettered:
			return fail(Conflict, "jobs: job %q is %s; only failed or dead-lettered jobs are retried", c.JobID, e.status)
		}
		j = m.revive(k, e)
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

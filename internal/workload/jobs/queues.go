package jobs

import (
	"slices"

	"github.com/surge-run/surge/internal/engine"
)

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
	for _, r := range slices.Clone(q.order) {
		if r.j == nil && r.seq != 0 && r.status == Pending {
			// Kept as a record (pending.go): live, then dropped.
			_, _, id := recordHead(m.pend.rec(r.rec))
			r.j = m.liveJob(id)
		}
		switch {
		case r.j != nil:
			m.dropJob(r.j, fx)
		case r.seq != 0:
			m.dropEnded(r.rec, r.status, r.seq, fx)
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
	if q.Paused || m.inBatch || m.holdNotes || (m.opts.Listening != nil && !m.opts.Listening()) {
		return
	}
	if n := q.readyCount(); n > 0 {
		fx.Notify(QueueReady{Queue: q.Name, Ready: n})
	}
}

func (q *Queue) readyCount() int {
	n := 0
	for i := range q.ready {
		n += q.ready[i].len()
	}
	return n
}

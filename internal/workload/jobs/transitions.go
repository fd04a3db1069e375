package jobs

import (
	"fmt"

	"github.com/surge-run/surge/internal/engine"
)

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
	if m.purgeQ.Push(purgeEntry{key: keyOf(j.ID), At: j.purgeAt}) {
		m.setTimer(fx, purgeTimerID, j.purgeAt, &PurgeJobs{})
	}
	m.toEnd = append(m.toEnd, j)
	// Past either cap the job due to be purged first goes now. Entries
	// of jobs that are gone or live again are skipped, so this ends: j
	// itself is in the queue, and dropping every record empties the
	// store. The purge timer may then fire for an entry already gone,
	// and re-arms for the new head. The bytes of the jobs this command
	// finishes count from the next one on, when they are records.
	for m.finished > m.opts.Limits.MaxFinished || m.ended.live > m.opts.Limits.MaxEndedBytes {
		e, ok := m.purgeQ.Pop()
		if !ok {
			break
		}
		m.purgeIfDue(e, fx)
	}
}

// purgeIfDue drops the job of a purge entry if it still ends at the
// entry's time (not retried since, nor purged already).
func (m *Machine) purgeIfDue(e purgeEntry, fx *engine.Effects) {
	if en, ok := m.ended.get(e.key); ok {
		if en.purgeAt == e.At {
			m.dropEnded(en.loc, en.status, en.seq, fx)
		}
		return
	}
	// Finished by the command being applied: not a record yet.
	if j := m.jobs[e.key.id()]; j != nil && j.Status.Finished() && j.purgeAt == e.At {
		m.dropJob(j, fx)
	}
}

// endFinished stores the jobs the command just applied finished as
// records (ended.go), unless it dropped or revived them, and compacts
// the chunks purges emptied.
func (m *Machine) endFinished() {
	for i, j := range m.toEnd {
		m.toEnd[i] = nil
		if !j.Status.Finished() || m.jobs[j.ID] != j {
			continue
		}
		e := m.ended.put(j.Queue, j)
		delete(m.jobs, j.ID)
		m.payloads -= int64(len(j.Payload))
		q := m.queues[j.Queue]
		q.order[q.mustIndex(j.Seq)] = jobRef{seq: j.Seq, rec: e.loc, status: j.Status, created: j.CreatedAt, started: j.StartedAt}
	}
	m.toEnd = m.toEnd[:0]
	moved := func(queue string, seq uint64, to recLoc) {
		q := m.queues[queue]
		q.order[q.mustIndex(seq)].rec = to
	}
	m.ended.compact(moved)
	m.pend.compact(moved)
}

// dropEnded drops the ended job whose record is at loc without decoding
// it (a copy of its payload, result and events for nothing): the
// record's head, its status and its seq are all dropJob reads.
func (m *Machine) dropEnded(loc recLoc, status Status, seq uint64, fx *engine.Effects) {
	queue, key, id := recordHead(m.ended.rec(loc))
	m.dropJob(&Job{ID: id, Queue: queue, IdemKey: key, Status: status, Seq: seq, heapIdx: -1}, fx)
}

func (m *Machine) hasEnded(k jobKey) bool {
	_, ok := m.ended.get(k)
	return ok
}

// revive makes the ended job of entry e a live *Job again (a manual
// retry).
func (m *Machine) revive(k jobKey, e endedEntry) *Job {
	_, j := m.ended.decode(e.loc)
	m.ended.del(k, e)
	m.jobs[j.ID] = j
	m.payloads += int64(len(j.Payload))
	q := m.queues[j.Queue]
	q.order[q.mustIndex(j.Seq)] = jobRef{j: j, seq: j.Seq}
	return j
}

// job is the job with id: the live one, or an ended one decoded (a copy
// the caller may keep); nil if there is none.
func (m *Machine) job(id string) *Job {
	if j := m.jobs[id]; j != nil {
		return j
	}
	k := keyOf(id)
	if e, ok := m.pend.get(k); ok {
		_, j := m.pend.decode(e.loc)
		return j
	}
	if e, ok := m.ended.get(k); ok {
		_, j := m.ended.decode(e.loc)
		return j
	}
	return nil
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
	q.removeOrder(j.Seq)
	if m.jobs[j.ID] == j {
		delete(m.jobs, j.ID)
		m.payloads -= int64(len(j.Payload))
	} else {
		// An ended job (dropEnded).
		k := keyOf(j.ID)
		if e, ok := m.ended.get(k); ok {
			m.ended.del(k, e)
		}
	}
	delete(m.traces, j.ID)
}

// removeOrder leaves a hole where the job with seq was in q.order and
// compacts once half of it is holes, so removal costs O(1) amortized.
func (q *Queue) removeOrder(seq uint64) {
	q.order[q.mustIndex(seq)] = jobRef{}
	q.holes++
	if q.holes*2 >= len(q.order) {
		n := 0
		for _, x := range q.order {
			if x.seq != 0 {
				q.order[n] = x
				n++
			}
		}
		clear(q.order[n:])
		q.order = q.order[:n]
		q.holes = 0
	}
}

func (q *Queue) mustIndex(seq uint64) int {
	i := q.orderIndex(seq)
	if i < 0 {
		panic("jobs: job missing from its queue's order")
	}
	return i
}

// orderIndex finds the job with seq in q.order, skipping holes: the
// live entries are in seq order, so binary search over positions works
// by looking at the nearest live entry.
func (q *Queue) orderIndex(seq uint64) int {
	lo, hi := 0, len(q.order)
	for lo < hi {
		mid := (lo + hi) / 2
		k := mid
		for k < hi && q.order[k].seq == 0 {
			k++
		}
		if k == hi {
			hi = mid
			continue
		}
		switch s := q.order[k].seq; {
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

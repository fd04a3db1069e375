package jobs

// Pending jobs kept as records until their first lease.
//
// A queue that nobody leases from piles up PENDING jobs: the peer's
// unary benchmark submits 100,000 with no worker running. As *Job structs
// (the job, its id, payload and event array: several heap objects and
// some thirty pointer words each) they were what the collector marked,
// what grew the heap through fresh pages (a page fault each: 8 % of the
// server's CPU in that run), and what the first snapshot after them
// encoded one by one. A pending job that no worker has held yet changes
// only when it leaves that state, so a small one is kept as an ended job
// is (ended.go): its snapshot encoding in a byte chunk, found through an
// index with no pointers for the collector, shared as it is by a
// snapshot. Any command about the job itself (a cancel, its TTL, a
// lease, a report or ack naming it) makes it a live *Job first
// (liveJob), and from then on it is handled as any other; queries
// decode a copy.
//
// Only a job that goes straight into its queue's ready heap behind more
// than liveBacklog pending ones, with a payload of at most
// snapCacheMaxPayload bytes, is kept so: one whose not_before is ahead
// waits behind a timer as a live job, and a large payload is not worth
// copying into a chunk.

// liveBacklog is how many pending jobs a queue holds before new ones are
// kept as records: while workers keep up, a job is leased soon after its
// submit, and a record would only be encoded to be decoded back (the
// jobs bench's end-to-end run, whose queue holds a few dozen, spent its
// submit→start p95 on it: 13–16 ms live, 22–31 ms as records). The
// package's tests set it to 0, so that their every job goes through
// records.
var liveBacklog int64 = 1024

// keepPending stores the new job j, ready now, as a record with its
// entries in q's order and ready heap; false if j is not one to keep so
// (the caller makes it live).
func (m *Machine) keepPending(q *Queue, j *Job, now int64) bool {
	if q.counts[Pending] <= liveBacklog || m.holdNotes || len(j.Payload) > snapCacheMaxPayload ||
		j.NotBefore > now || (j.TTLNs > 0 && now >= addSat(j.TTLFrom, j.TTLNs)) {
		// holdNotes: a lease for a waiting stream follows in this command
		// (submitLease), most likely of this very job.
		return false
	}
	j.heapIdx = 0 // encoded as in its ready heap, where it goes below
	k := keyOf(j.ID)
	e := m.pend.putKey(k, q.Name, j)
	q.order = append(q.order, jobRef{seq: j.Seq, rec: e.loc, status: Pending, created: j.CreatedAt})
	q.ready[j.Priority].pushRecord(j.Seq, k)
	return true
}

// liveJob is the unfinished job with id as a live *Job, made live if it
// was kept as a record; nil if there is none.
func (m *Machine) liveJob(id string) *Job {
	if j := m.jobs[id]; j != nil {
		return j
	}
	if m.pend.len() == 0 {
		return nil
	}
	k := keyOf(id)
	if e, ok := m.pend.get(k); ok {
		return m.makeLive(k, e, true)
	}
	return nil
}

// makeLive turns the record of entry e into a live *Job. A job that was
// ready is pushed into its heap again (requeue), its record's entry left
// stale, unless the caller has just popped that entry (a lease).
func (m *Machine) makeLive(k jobKey, e endedEntry, requeue bool) *Job {
	_, j := m.pend.decode(e.loc)
	m.pend.del(k, e)
	m.jobs[j.ID] = j
	q := m.queues[j.Queue]
	q.order[q.mustIndex(j.Seq)] = jobRef{j: j, seq: j.Seq}
	if j.heapIdx >= 0 {
		j.heapIdx = -1
		if requeue {
			h := &q.ready[j.Priority]
			h.stale++
			h.push(j)
		}
	}
	return j
}

// popReady takes the first ready job of h (live), or nil once h holds
// none; stale entries it meets are dropped.
func (m *Machine) popReady(h *jobHeap) *Job {
	for len(h.e) > 0 {
		top := h.popEntry()
		if top.j != nil {
			return top.j
		}
		if e, ok := m.pend.get(top.key); ok && e.seq == top.seq {
			return m.makeLive(top.key, e, false)
		}
		h.stale--
	}
	return nil
}

// hasPending reports whether a job with key k is kept as a record.
func (m *Machine) hasPending(k jobKey) bool {
	_, ok := m.pend.get(k)
	return ok
}

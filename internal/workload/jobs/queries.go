package jobs

import (
	"fmt"
	"sort"
	"strconv"
)

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
		if j := m.job(q.ID); j != nil {
			return viewJob(j)
		}
		return (*Job)(nil)
	case GetJobLogs:
		if j := m.job(q.ID); j != nil {
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
	return m.opsQuery(q)
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
			if q.order[k].seq != 0 {
				return q.order[k].seq > after
			}
		}
		return true
	})
	p := &JobPage{Found: true}
	bytes := 0
	for ; i < len(q.order); i++ {
		r := q.order[i]
		status := r.status
		if r.j != nil {
			status = r.j.Status
		}
		if r.seq == 0 || (l.Status != StatusUnspecified && status != l.Status) {
			continue
		}
		j := r.j
		switch {
		case j == nil && status == Pending:
			_, j = m.pend.decode(r.rec)
		case j == nil:
			_, j = m.ended.decode(r.rec)
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
	return append([]any{&Result{}, QueueReady{}, CancelRequested{}, JobEnded{},
		GetJob{}, GetJobLogs{}, ListQueues{}, GetStats{}, WorkerJobs{}, ListJobs{},
		&Job{}, []JobEvent{}, []*Queue{}, &Stats{}, &JobPage{}, []string{}}, opsWireTypes()...)
}

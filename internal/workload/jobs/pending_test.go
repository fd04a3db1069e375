package jobs

import (
	"bytes"
	"fmt"
	"testing"
)

// New ready jobs are kept as records (pending.go): none is a live *Job
// until a command names it; a query reads one without making it live; a
// refused command (an ack of a pending job) makes it live, and it is
// leased in its turn all the same; a cancel takes one out of the ready
// count; leases take the rest in priority then submission order, and
// the stale heap entries left behind are all gone once the heap is.
func TestPendingJobsKeptAsRecords(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{})
	m := h.Machines[0]
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		if r := h.Client("", &Submit{JobID: id, Queue: DefaultQueue, Payload: []byte("p"), Priority: int32(i % 2)}); r.Outcome != Created {
			t.Fatalf("submit: %+v", r)
		}
		ids = append(ids, id)
	}
	q := m.queues[DefaultQueue]
	if len(m.jobs) != 0 || m.pend.len() != 12 || q.readyCount() != 12 {
		t.Fatalf("%d live jobs, %d records, %d ready; want 0, 12, 12", len(m.jobs), m.pend.len(), q.readyCount())
	}
	if j, ok := m.Query(GetJob{ID: ids[3]}).(*Job); !ok || j == nil || j.ID != ids[3] || j.Status != Pending || !bytes.Equal(j.Payload, []byte("p")) {
		t.Fatalf("GetJob of a record: %+v", j)
	}
	if len(m.jobs) != 0 {
		t.Fatal("a query made a record live")
	}
	if r := h.Client("", &Ack{JobID: ids[1], Worker: "w"}); r.Outcome != Conflict {
		t.Fatalf("ack of a pending job: %+v", r)
	}
	if r := h.Client("", &Cancel{JobID: ids[5]}); r.Outcome != OK {
		t.Fatalf("cancel of a pending job: %+v", r)
	}
	if m.jobs[ids[1]] == nil || m.pend.len() != 10 || q.readyCount() != 11 {
		t.Fatalf("after an ack and a cancel: live %v, %d records, %d ready; want the acked one live, 10, 11",
			m.jobs[ids[1]] != nil, m.pend.len(), q.readyCount())
	}
	var got []string
	for {
		r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 4, LeaseNs: 60e9})
		if len(r.Jobs) == 0 {
			break
		}
		for _, j := range r.Jobs {
			got = append(got, j.ID)
		}
	}
	var want []string
	for _, p := range []int{1, 0} {
		for i, id := range ids {
			if i%2 == p && i != 5 {
				want = append(want, id)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("leased %v, want %v", got, want)
	}
	for p := range q.ready {
		if h := q.ready[p]; len(h.e) != 0 || h.stale != 0 {
			t.Fatalf("priority %d's heap holds %d entries, %d stale, once every job is leased", p, len(h.e), h.stale)
		}
	}
	if m.pend.len() != 0 {
		t.Fatalf("%d records left once every job is leased", m.pend.len())
	}
	h.CheckReplay()
}

// TestLiveBacklog: a queue's first liveBacklog pending jobs stay live
// (a worker that keeps up leases them soon); the ones behind them are
// kept as records.
func TestLiveBacklog(t *testing.T) {
	defer func(v int64) { liveBacklog = v }(liveBacklog)
	liveBacklog = 3
	h := newHarness(t, 1, 1, Limits{})
	m := h.Machines[0]
	for i := range 5 {
		id := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		if r := h.Client("", &Submit{JobID: id, Queue: DefaultQueue, Payload: []byte("p")}); r.Outcome != Created {
			t.Fatalf("submit: %+v", r)
		}
	}
	if len(m.jobs) != 3 || m.pend.len() != 2 {
		t.Fatalf("%d live jobs and %d records; want 3 and 2", len(m.jobs), m.pend.len())
	}
	h.CheckReplay()
}

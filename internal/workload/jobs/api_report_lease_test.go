package jobs_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
)

// Reports that lease the stream's next job (one queue, jq's protocol)
// keep the worker at its concurrency, never over it, and hand out the
// jobs by priority, each job once.
func TestAPIReportLeasesNextWithinConcurrency(t *testing.T) {
	c := newAPI(t, time.Hour)
	w := c.worker(t, "w1", 2, false)
	prios := []int32{1, 9, 4, 7, 2, 8}
	byID := map[string]int32{}
	for _, p := range prios {
		byID[c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Priority: p})] = p
	}
	// Pushed while submits arrive: the first two are whatever was ready.
	held := []string{w.next(t).JobId, w.next(t).JobId}
	w.none(t, 200*time.Millisecond)
	seen := map[string]bool{held[0]: true, held[1]: true}
	var order []int32
	for len(held) > 0 {
		id := held[0]
		held = held[1:]
		if err := c.report(t, "w1", id, true); err != nil {
			t.Fatal(err)
		}
		if len(seen) == len(prios) {
			continue
		}
		a := w.next(t)
		if seen[a.JobId] {
			t.Fatalf("job %s pushed twice", a.JobId)
		}
		seen[a.JobId] = true
		order = append(order, a.Priority)
		held = append(held, a.JobId)
		// One slot freed, one job pushed: a third would exceed 2.
		w.none(t, 50*time.Millisecond)
	}
	for i := 1; i < len(order); i++ {
		if order[i] > order[i-1] {
			t.Fatalf("pushed after reports by priority %v, want descending", order)
		}
	}
	for id := range byID {
		if j := c.job(t, id); j.Status != jqpb.JobStatus_DONE {
			t.Fatalf("job %s: %v", id, j.Status)
		}
	}
}

// A SubmitJobs batch while a worker waits gives it as many jobs as it
// has free slots, no more, by priority; reports bring the rest.
func TestAPISubmitJobsLeasesWithinConcurrency(t *testing.T) {
	c := newAPI(t, time.Hour)
	w := c.worker(t, "w1", 3, false)
	// The stream settles (Reclaim) before it leases for itself; a first
	// job pushed shows it has.
	first := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
	if a := w.next(t); a.JobId != first {
		t.Fatalf("got %v", a)
	}
	var reqs []*jqpb.SubmitJobRequest
	for _, p := range []int32{1, 8, 3, 6, 2} {
		reqs = append(reqs, &jqpb.SubmitJobRequest{QueueName: "default", Priority: p})
	}
	if _, err := c.jobs.SubmitJobs(ctxT(t), connect.NewRequest(&jqpb.SubmitJobsRequest{Jobs: reqs})); err != nil {
		t.Fatal(err)
	}
	got := []int32{w.next(t).Priority, w.next(t).Priority}
	w.none(t, 200*time.Millisecond)
	if got[0] != 8 || got[1] != 6 {
		t.Fatalf("pushed priorities %v, want [8 6]", got)
	}
	if err := c.report(t, "w1", first, true); err != nil {
		t.Fatal(err)
	}
	if a := w.next(t); a.Priority != 3 {
		t.Fatalf("after a report: priority %d, want 3", a.Priority)
	}
	w.none(t, 100*time.Millisecond)
}

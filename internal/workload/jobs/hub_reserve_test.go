package jobs

import "testing"

// Every lease for a stream reserves its slots first, the stream's own
// Lease too: a slot the stream counted free while its Lease waited for
// the log was also free to a submit (SubmitLease), and both leased it.
// A worker of concurrency 2 was pushed a third job that way when the
// engine began to hold commands for the batch in flight.
func TestStreamLeaseReservesItsSlots(t *testing.T) {
	h := NewHub(0)
	w := &worker{id: "w1", concurrency: 2, inflight: map[string]int64{}, queues: []string{DefaultQueue}}
	h.workers[w.id] = w
	s, err := h.open(w.id, nil, false, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !h.adopt(s, nil) {
		t.Fatal("stream not adopted")
	}
	if k := h.reserveLease(s, MaxLeaseBatch); k != 2 {
		t.Fatalf("the stream's lease reserved %d slots, want its 2 free", k)
	}
	if st, k := h.reserveFor(DefaultQueue, nextJobs); st != nil || k != 0 {
		t.Fatalf("a submit reserved %d slots of a stream whose own lease holds them all", k)
	}
	// The lease took one job: once it is tracked, one slot is free again,
	// and never before.
	if !h.track(s, []*Job{{ID: "j1"}}, 2) {
		t.Fatal("job not tracked")
	}
	if got := w.free(); got != 1 {
		t.Fatalf("free after the lease took one of two: %d, want 1", got)
	}
	if st, k := h.reserveFor(DefaultQueue, nextJobs); st != s || k != 1 {
		t.Fatalf("a submit after the lease reserved %d slots of %v, want 1 of the stream", k, st)
	}
	if k := h.reserveLease(s, MaxLeaseBatch); k != 0 {
		t.Fatalf("the stream's next lease reserved %d slots with none free", k)
	}
	h.unreserve(s, 0)
	if w.reserved != 1 {
		t.Fatalf("reserved %d, want the submit's 1", w.reserved)
	}
}

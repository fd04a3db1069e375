package jobs

import "testing"

// settledStream is a hub with one worker of concurrency 2 on the default
// queue, and its stream open and settled (nothing to reclaim).
func settledStream(t *testing.T) (*Hub, *worker, *stream) {
	t.Helper()
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
	return h, w, s
}

// Every lease for a stream reserves its slots first, the stream's own
// Lease too: a slot the stream counted free while its Lease waited for
// the log was also free to a submit (SubmitLease), and both leased it.
// A worker of concurrency 2 was pushed a third job that way when the
// engine began to hold commands for the batch in flight.
func TestStreamLeaseReservesItsSlots(t *testing.T) {
	h, w, s := settledStream(t)
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

// A report that leases its job's successor reserves a slot while the
// reported job still counts as held: free counts the two once, so that
// a full worker's reports in flight at once each lease a successor (the
// second used to find free() below zero and lease none), and the worker
// still never gets more than its concurrency.
func TestReportsInFlightCountTheirSlotOnce(t *testing.T) {
	h, w, s := settledStream(t)
	if !h.track(s, []*Job{{ID: "a"}, {ID: "b"}}, h.reserveLease(s, 2)) {
		t.Fatal("jobs not tracked")
	}
	for _, id := range []string{"a", "b"} {
		if h.reserveNext(w.id, id) != s {
			t.Fatalf("the report of %s leases no successor", id)
		}
		if f := w.free(); f != 0 {
			t.Fatalf("free %d with both jobs reported and their successors reserved, want 0", f)
		}
	}
	if h.reserveNext(w.id, "a") != nil {
		t.Fatal("a second report of a job on its way leased a successor too")
	}
	if st, k := h.reserveFor(DefaultQueue, nextJobs); st != nil || k != 0 {
		t.Fatalf("a submit reserved %d slots of a full worker", k)
	}
	for _, id := range []string{"a", "b"} {
		if orphans := h.reported(w.id, id, true, s, &Result{Next: []*Job{{ID: id + "2"}}}); len(orphans) != 0 {
			t.Fatalf("orphans %v", orphans)
		}
	}
	if len(w.inflight) != 2 || w.reserved != 0 || len(w.passing) != 0 || w.free() != 0 {
		t.Fatalf("after the reports: in flight %d, reserved %d, passing %d, free %d; want 2, 0, 0, 0", len(w.inflight), w.reserved, len(w.passing), w.free())
	}
	// A job ended elsewhere while its report is on its way: its slot is
	// its successor's alone.
	if h.reserveNext(w.id, "a2") != s {
		t.Fatal("no successor for a2")
	}
	h.untrack([]*Job{{ID: "a2"}})
	if f := w.free(); f != 0 {
		t.Fatalf("free %d after a reported job ended elsewhere, want 0 (its successor holds the slot)", f)
	}
	h.reported(w.id, "a2", true, s, nil)
	if f := w.free(); f != 1 || len(w.passing) != 0 {
		t.Fatalf("free %d, passing %d after a report that leased nothing, want 1, 0", f, len(w.passing))
	}
}

// A note that jobs are ready wakes a stream whose own Lease holds its
// free slots: that Lease may have been applied before the jobs were and
// found none, and with its slots reserved the note used to pass the
// stream by (free() 0), which then slept with jobs ready (a CI run:
// "no assignment in 10 s" after a SubmitJobs).
func TestReadyNoteWakesAStreamWhoseLeaseHoldsItsSlots(t *testing.T) {
	h, w, s := settledStream(t)
	<-s.wake // the opening's
	if k := h.reserveLease(s, 2); k != 2 {
		t.Fatalf("reserved %d, want 2", k)
	}
	h.Notify(QueueReady{Queue: DefaultQueue, Ready: 1})
	select {
	case <-s.wake:
	default:
		t.Fatal("the note did not wake the stream whose Lease holds its slots")
	}
	h.unreserve(s, 2)
	if s.leasing != 0 || w.reserved != 0 {
		t.Fatalf("leasing %d, reserved %d after the Lease, want 0", s.leasing, w.reserved)
	}
}

// linked, which submits and ready jobs read without the hub's lock to
// learn that no stream waits, counts byQueue's entries through streams
// opened on several queues (one twice), replaced and closed; and a
// submit finds a stream as soon as one is linked, none once the last is
// gone.
func TestHubLinkedCountsItsStreams(t *testing.T) {
	h := NewHub(0)
	check := func(when string) {
		t.Helper()
		n := 0
		for _, ss := range h.byQueue {
			n += len(ss)
		}
		if got := h.linked.Load(); got != int64(n) {
			t.Fatalf("%s: linked %d, byQueue holds %d", when, got, n)
		}
	}
	for i, qs := range [][]string{{DefaultQueue}, {"a", "b"}, {"a", "a"}} {
		id := string(rune('p' + i))
		h.workers[id] = &worker{id: id, concurrency: 1, inflight: map[string]int64{}, queues: qs}
	}
	if st, _ := h.reserveFor(DefaultQueue, nextJobs); st != nil {
		t.Fatal("a submit found a stream in an empty hub")
	}
	var open []*stream
	for i, id := range []string{"p", "q", "r", "q"} { // q's second stream replaces its first
		s, err := h.open(id, nil, false, "s"+string(rune('0'+i)))
		if err != nil {
			t.Fatal(err)
		}
		h.adopt(s, nil)
		open = append(open, s)
		check("after open " + id)
	}
	if st, k := h.reserveFor(DefaultQueue, nextJobs); st != open[0] || k != 1 {
		t.Fatalf("a submit reserved %d slots of %v, want 1 of p's stream", k, st)
	}
	h.delivered(open[0], 1, nil)
	for _, s := range open {
		h.close(s)
		check("after close " + s.session)
	}
	if h.linked.Load() != 0 {
		t.Fatalf("linked %d with every stream closed", h.linked.Load())
	}
	if st, _ := h.reserveFor(DefaultQueue, nextJobs); st != nil {
		t.Fatal("a submit found a stream after every stream closed")
	}
}

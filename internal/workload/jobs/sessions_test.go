package jobs

import (
	"testing"
)

func (h *harness) get(id string) *Job {
	h.T.Helper()
	for _, m := range h.Machines {
		if j := m.job(id); j != nil {
			return j
		}
	}
	h.T.Fatalf("no job %s", id)
	return nil
}

// A heartbeat extends the jobs the worker names, or with no names those
// of the live stream (session) only: a job pushed on a stream that is
// gone is not kept alive by the id's heartbeats.
func TestExtendOnlyNamedOrLiveSessionJobs(t *testing.T) {
	h := one(t)
	for _, id := range []string{"a", "b", "c"} {
		h.Client("", &Submit{JobID: id, Queue: DefaultQueue})
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 30e9, Session: "s1"})
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 2, LeaseNs: 30e9, Session: "s2"})
	h.Advance(20e9)
	r := h.Client("", &Extend{Worker: "w", Session: "s2", LeaseNs: 30e9})
	if r.Outcome != OK || len(r.Jobs) != 3 {
		t.Fatalf("extend by session: %+v", r)
	}
	if a, b := h.get("a"), h.get("b"); a.LeaseUntil != b.LeaseUntil-20e9 {
		t.Fatalf("a (session s1) until %d, b (s2) until %d: want only b extended", a.LeaseUntil, b.LeaseUntil)
	}
	if r := h.Client("", &Extend{Worker: "w", LeaseNs: 30e9}); r.Outcome != Same {
		t.Fatalf("a heartbeat with no live stream and no names extended something: %+v", r)
	}
	h.Advance(5e9)
	if r := h.Client("", &Extend{Worker: "w", LeaseNs: 30e9, Declared: true, JobIDs: []string{"c", "nope"}}); r.Outcome != OK {
		t.Fatalf("extend by name: %+v", r)
	}
	h.Advance(6e9) // 31 s after the lease: a expired, b and c live
	if a := h.get("a"); a.Status != Pending || a.RetryCount != 1 {
		t.Fatalf("a: %s, %d retries", a.Status, a.RetryCount)
	}
	if h.get("b").Status != Assigned || h.get("c").Status != Assigned {
		t.Fatal("b or c lost its lease")
	}
	if r := h.Client("", &Extend{Worker: "w", LeaseNs: 30e9, JobIDs: make([]string, MaxHeldJobs+1), Declared: true}); r.Outcome != Invalid {
		t.Fatalf("over-long list: %+v", r)
	}
}

// A new stream of a worker that declares what it holds keeps those,
// gives back unstarted jobs uncounted and started ones counted; one that
// cannot declare is offered them again, counted.
func TestReclaim(t *testing.T) {
	h := one(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		h.Client("", &Submit{JobID: id, Queue: DefaultQueue, MaxRetries: 1})
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 4, LeaseNs: 30e9, Session: "s1"})
	h.Client("", &Ack{JobID: "b", Worker: "w"})
	h.Client("", &Ack{JobID: "c", Worker: "w"})
	h.Advance(10e9)
	r := h.Client("", &Reclaim{Worker: "w", Session: "s2", LeaseNs: 30e9, Declared: true, Keep: []string{"a", "c"}})
	if r.Outcome != OK || len(r.Jobs) != 2 || r.Jobs[0].ID != "a" || r.Jobs[1].ID != "c" {
		t.Fatalf("declared reclaim: %+v", r)
	}
	for id, want := range map[string]struct {
		st      Status
		retries int32
		session string
	}{"a": {Assigned, 0, "s2"}, "b": {Pending, 1, ""}, "c": {Running, 0, "s2"}, "d": {Pending, 0, ""}} {
		j := h.get(id)
		if j.Status != want.st || j.RetryCount != want.retries || j.Session != want.session {
			t.Fatalf("%s: %s, %d retries, session %q; want %+v", id, j.Status, j.RetryCount, j.Session, want)
		}
	}
	if j := h.get("a"); j.LeaseUntil != h.Now+30e9 {
		t.Fatal("a kept without a fresh lease")
	}
	if ev := h.get("b").Events; ev[len(ev)-1].Reason != ReasonWorkerLost {
		t.Fatalf("b's last event: %+v", ev[len(ev)-1])
	}
	if r := h.Client("", &Reclaim{Worker: "w", Session: "s2", LeaseNs: 30e9, Declared: true, Keep: []string{"a", "c"}}); r.Outcome != Same || len(r.Jobs) != 2 {
		t.Fatalf("the same stream again: %+v", r)
	}
	// A jq worker's new stream: offered again, each offer a retry.
	r = h.Client("", &Reclaim{Worker: "w", Session: "s3", LeaseNs: 30e9})
	if r.Outcome != OK || len(r.Jobs) != 2 {
		t.Fatalf("undeclared reclaim: %+v", r)
	}
	if j := h.get("a"); j.Status != Assigned || j.RetryCount != 1 || j.Session != "s3" || j.Events[len(j.Events)-1].Reason != ReasonReoffered {
		t.Fatalf("a offered again: %+v", j)
	}
	// No retry left: dead-lettered, not offered.
	r = h.Client("", &Reclaim{Worker: "w", Session: "s4", LeaseNs: 30e9})
	if r.Outcome != OK || len(r.Jobs) != 0 {
		t.Fatalf("reclaim with no retries left: %+v", r)
	}
	if j := h.get("a"); j.Status != DeadLettered || j.DeadReason != ReasonWorkerLost {
		t.Fatalf("a: %+v", j)
	}
	if r := h.Client("", &Reclaim{Worker: "w", LeaseNs: 30e9}); r.Outcome != Invalid {
		t.Fatalf("reclaim without a session: %+v", r)
	}
}

// Jobs a stream leased but could not push go back at once, uncounted,
// unless another stream has them now.
func TestUnsent(t *testing.T) {
	h := one(t)
	for _, id := range []string{"a", "b"} {
		h.Client("", &Submit{JobID: id, Queue: DefaultQueue})
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 2, LeaseNs: 30e9, Session: "s1"})
	h.Client("", &Reclaim{Worker: "w", Session: "s2", LeaseNs: 30e9, Declared: true, Keep: []string{"b"}})
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 2, LeaseNs: 30e9, Session: "s1"}) // a again, by the old stream
	r := h.Client("", &Unsent{Worker: "w", Session: "s1", JobIDs: []string{"a", "b"}})
	if r.Outcome != OK || len(r.Jobs) != 1 || r.Jobs[0].ID != "a" {
		t.Fatalf("unsent: %+v", r)
	}
	if a := h.get("a"); a.Status != Pending || a.RetryCount != 0 || a.Events[len(a.Events)-1].Reason != ReasonNotDelivered {
		t.Fatalf("a: %+v", a)
	}
	if b := h.get("b"); b.Status != Assigned || b.Session != "s2" {
		t.Fatalf("b, the newer stream's, was given back: %+v", b)
	}
}

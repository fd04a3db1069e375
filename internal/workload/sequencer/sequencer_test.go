package sequencer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

func one(t *testing.T, lim Limits) *harness { return newHarness(t, 1, 1, lim) }

// want applies cmd from a client and requires its outcome; a refusal
// must also declare Unchanged (the harness logs only what changed).
func (h *harness) want(o Outcome, cmd engine.Command) *Result {
	h.T.Helper()
	n := len(h.Log[0])
	r := h.Client("", cmd)
	if r.Outcome != o {
		h.T.Fatalf("%T %+v: %s (%s), want %s", cmd, cmd, r.Outcome, r.Msg, o)
	}
	if logged := len(h.Log[0]) > n; logged != (o == OK || o == Created) {
		h.T.Fatalf("%T: %s, logged=%v", cmd, o, logged)
	}
	return r
}

func TestBadInputChangesNothing(t *testing.T) {
	h := one(t, Limits{MaxGroups: 2, MaxUnreleased: 3})
	long := strings.Repeat("x", MaxNameLen+1)
	h.want(Created, &Publish{Group: "g", MsgID: "a"})
	h.want(Invalid, &Publish{Group: "", MsgID: "a"})
	h.want(Invalid, &Publish{Group: long, MsgID: "a"})
	h.want(Invalid, &Publish{Group: "g", MsgID: ""})
	h.want(Invalid, &Publish{Group: "g", MsgID: long[:MaxIDLen+1]})
	h.want(Invalid, &Publish{Group: "g", MsgID: "b", RetentionNs: -1})
	h.want(Exhausted, &Publish{Group: "g", MsgID: "b", Payload: make([]byte, MaxPayloadBytes+1)})
	h.want(Invalid, &Publish{Group: "g", MsgID: "b", Seq: 2}) // server mode
	h.want(Created, &Publish{Group: "g", MsgID: "b"})
	h.want(Created, &Publish{Group: "g", MsgID: "c"})
	h.want(Exhausted, &Publish{Group: "g", MsgID: "d"}) // a window of 3
	h.want(Exhausted, &Publish{Group: "c", MsgID: "a", Seq: 4})
	h.want(Created, &Publish{Group: "c", MsgID: "a", Seq: 3})
	h.want(Exhausted, &Publish{Group: "third", MsgID: "a"}) // 2 groups
	h.want(NotFound, &Lease{Group: "none", Processor: "p", Max: 1, LeaseNs: 1})
	h.want(Invalid, &Lease{Group: "g", Processor: "", Max: 1, LeaseNs: 1})
	h.want(Invalid, &Lease{Group: "g", Processor: "p", Max: 0, LeaseNs: 1})
	h.want(Invalid, &Lease{Group: "g", Processor: "p", Max: MaxLeaseBatch + 1, LeaseNs: 1})
	h.want(Invalid, &Lease{Group: "g", Processor: "p", Max: 1, LeaseNs: 0})
	h.want(Invalid, &Complete{Group: "g", Seq: 0, Processor: "p"})
	h.want(NotFound, &Complete{Group: "g", Seq: 9, Processor: "p"})
	h.want(NotFound, &Complete{Group: "c", Seq: 1, Processor: "p"}) // a gap
	h.want(Conflict, &Complete{Group: "g", Seq: 1, Processor: "p"}) // not leased
	h.want(Invalid, &Extend{Group: "g", Processor: "p", LeaseNs: -1})
	h.want(Same, &Extend{Group: "g", Processor: "p", LeaseNs: 1})
	h.want(Same, &Release{Group: "g", Processor: "p"})
	h.want(Invalid, &Commit{Group: "g", Consumer: "k", Position: 1}) // nothing released
	h.want(Invalid, &Commit{Group: "g", Consumer: "", Position: 0})
	h.want(NotFound, &DeleteGroup{Group: "none"})
	// A client cannot forge what only timers do.
	h.want(Invalid, &LeaseExpired{Group: "g", Seq: 1})
	h.want(Invalid, &PurgeMessages{})
	// A batch is checked whole: one bad message refuses all of it.
	h.want(Conflict, &PublishBatch{Msgs: []Publish{{Group: "c", MsgID: "x", Seq: 1}, {Group: "c", MsgID: "y", Seq: 1}}})
	h.want(Invalid, &PublishBatch{Msgs: []Publish{{Group: "c", MsgID: "x", Seq: 1}, {Group: "g", MsgID: "y"}}})
	h.want(Invalid, &PublishBatch{})
	if in := h.Machines[0].Query(GroupInfo{Group: "c"}).(*Info); in.Pending != 1 || in.Missing != 1 {
		t.Fatalf("after refused batches: %+v", in)
	}
}

// The rules of the brief, step by step on one group.
func TestGapHoldsAndRunReleases(t *testing.T) {
	h := one(t, Limits{})
	for _, seq := range []uint64{4, 2, 3} {
		h.want(Created, &Publish{Group: "c", MsgID: string(rune('a' + seq)), Seq: seq, RetentionNs: 10e9})
	}
	h.want(Same, &Publish{Group: "c", MsgID: "c", Seq: 9}) // the first one's seq
	r := h.want(OK, &Lease{Group: "c", Processor: "p", Max: 10, LeaseNs: 5e9})
	if len(r.Messages) != 3 || r.Messages[0].Seq != 2 {
		t.Fatalf("lease: %+v", r.Messages)
	}
	for _, seq := range []uint64{4, 3, 2} {
		if r := h.want(OK, &Complete{Group: "c", Seq: seq, Processor: "p"}); r.Position != 0 {
			t.Fatalf("released past the gap at 1: %+v", r)
		}
	}
	h.want(Same, &Complete{Group: "c", Seq: 3, Processor: "p"})
	h.want(Created, &Publish{Group: "c", MsgID: "a", Seq: 1, RetentionNs: 10e9})
	h.Advance(1e9)
	r = h.want(OK, &Lease{Group: "c", Processor: "q", Max: 10, LeaseNs: 5e9})
	if r := h.want(OK, &Complete{Group: "c", Seq: r.Messages[0].Seq, Processor: "q"}); r.Position != 4 {
		t.Fatalf("the run after the filled gap: %+v", r)
	}
	h.want(Conflict, &Publish{Group: "c", MsgID: "z", Seq: 4}) // released
	h.want(OK, &Commit{Group: "c", Consumer: "k", Position: 2})
	h.want(Conflict, &Commit{Group: "c", Consumer: "k", Position: 1})
	out := h.Machines[0].Query(ReadOutput{Group: "c"}).(*Output)
	if out.FirstKept != 3 || len(out.Messages) != 2 || out.Messages[0].Seq != 3 || out.Position != 4 {
		t.Fatalf("read after a commit purged 1 and 2: %+v", out)
	}
	// Purged ids are forgotten; the retention takes the rest.
	h.want(Conflict, &Publish{Group: "c", MsgID: "a", Seq: 1})
	h.Advance(10e9)
	if out := h.Machines[0].Query(ReadOutput{Group: "c", After: 0}).(*Output); len(out.Messages) != 0 || out.FirstKept != 5 {
		t.Fatalf("after the retention: %+v", out)
	}
	// Deleting frees the group's mode.
	h.want(OK, &DeleteGroup{Group: "c"})
	if r := h.want(Created, &Publish{Group: "c", MsgID: "s"}); r.Seq != 1 {
		t.Fatalf("server seq after delete: %+v", r)
	}
}

func TestLeaseExpiryExtendRelease(t *testing.T) {
	h := one(t, Limits{})
	for _, id := range []string{"a", "b", "c"} {
		h.want(Created, &Publish{Group: "g", MsgID: id})
	}
	h.want(OK, &Lease{Group: "g", Processor: "p", Max: 2, LeaseNs: 10e9})
	h.want(OK, &Lease{Group: "g", Processor: "q", Max: 2, LeaseNs: 10e9})
	h.Advance(5e9)
	h.want(OK, &Extend{Group: "g", Processor: "p", LeaseNs: 20e9})
	h.Advance(6e9) // q's lease ran out, p's did not
	in := h.Machines[0].Query(GroupInfo{Group: "g"}).(*Info)
	if in.Leased != 2 || in.Pending != 1 {
		t.Fatalf("after q's expiry: %+v", in)
	}
	h.want(Conflict, &Complete{Group: "g", Seq: 3, Processor: "q"})
	h.want(OK, &Release{Group: "g", Processor: "p"})
	r := h.want(OK, &Lease{Group: "g", Processor: "r", Max: 5, LeaseNs: 1e9})
	if len(r.Messages) != 3 || r.Messages[0].Seq != 1 || r.Messages[0].Processing != h.Now {
		t.Fatalf("lease after release: %+v", r.Messages)
	}
	// Deleting the group cancels its lease timers.
	if len(h.Timers[0]) != 3 {
		t.Fatalf("timers: %v", h.Timers[0])
	}
	h.want(OK, &DeleteGroup{Group: "g"})
	if len(h.Timers[0]) != 0 {
		t.Fatalf("timers left after delete: %v", h.Timers[0])
	}
}

func TestQueries(t *testing.T) {
	h := one(t, Limits{})
	for _, g := range []string{"b", "a"} {
		for range 3 {
			h.Client("", &Publish{Group: g, MsgID: h.rngID()})
		}
	}
	r := h.want(OK, &Lease{Group: "a", Processor: "p", Max: 2, LeaseNs: 1e9})
	h.want(OK, &Complete{Group: "a", Seq: r.Messages[0].Seq, Processor: "p"})
	h.want(OK, &Commit{Group: "a", Consumer: "z", Position: 0})
	h.want(OK, &Commit{Group: "a", Consumer: "y", Position: 1})
	list := h.Machines[0].Query(ListGroups{}).([]*Info)
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list: %+v", list)
	}
	a := list[0]
	if a.Mode != ModeServer || a.Position != 1 || a.Last != 3 || a.Pending != 1 || a.Leased != 1 || a.Released != 1 ||
		a.Missing != 0 || len(a.Consumers) != 2 || a.Consumers[0] != (Consumer{Name: "y", Position: 1}) {
		t.Fatalf("info: %+v", a)
	}
	if out := h.Machines[0].Query(ReadOutput{Group: "none"}).(*Output); out.Found {
		t.Fatalf("read of no group: %+v", out)
	}
	if out := h.Machines[0].Query(ReadOutput{Group: "a", Limit: 1}).(*Output); len(out.Messages) != 1 || out.Messages[0].Processed == 0 {
		t.Fatalf("read: %+v", out)
	}
	if in := h.Machines[0].Query(GroupInfo{Group: "none"}).(*Info); in != nil {
		t.Fatalf("info of no group: %+v", in)
	}
}

func (h *harness) rngID() string { return fmt.Sprint("id", h.Rng.Uint64()) }

// A Release with Seqs gives back only those of the processor's leases:
// the API sends it for a lease whose answer never reached the processor,
// which must not lose the leases it is working on.
func TestReleaseListedSeqs(t *testing.T) {
	h := one(t, Limits{})
	for _, id := range []string{"a", "b", "c", "d"} {
		h.want(Created, &Publish{Group: "g", MsgID: id})
	}
	h.want(OK, &Lease{Group: "g", Processor: "p", Max: 2, LeaseNs: 10e9})
	h.want(OK, &Lease{Group: "g", Processor: "p", Max: 1, LeaseNs: 10e9})
	h.want(OK, &Lease{Group: "g", Processor: "q", Max: 1, LeaseNs: 10e9})
	h.want(OK, &Release{Group: "g", Processor: "p", Seqs: []uint64{3, 4}}) // 4 is q's
	h.want(Same, &Release{Group: "g", Processor: "p", Seqs: []uint64{3}})
	in := h.Machines[0].Query(GroupInfo{Group: "g"}).(*Info)
	if in.Leased != 3 || in.Pending != 1 {
		t.Fatalf("after releasing seq 3 of p: %+v", in)
	}
	h.want(OK, &Complete{Group: "g", Seq: 1, Processor: "p"})
	h.want(OK, &Complete{Group: "g", Seq: 4, Processor: "q"})
	b, _ := (&Release{Group: "g", Processor: "p", Seqs: []uint64{3}}).AppendBinary(nil)
	if c, err := Decode(b); err != nil || len(c.(*Release).Seqs) != 1 {
		t.Fatalf("decoded %#v, %v", c, err)
	}
}

// TestLeaseIsBoundedInBytes: a lease with MaxBytes takes messages only
// while their payloads fit (always at least one), and both forms of the
// command decode as they were logged: a lease logged before MaxBytes
// existed is unbounded.
func TestLeaseIsBoundedInBytes(t *testing.T) {
	h := one(t, Limits{})
	big := make([]byte, 300)
	for i := range 10 {
		if r := h.Client("", &Publish{Group: "g", MsgID: fmt.Sprint("m", i), Payload: big}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	if r := h.Client("", &Lease{Group: "g", Processor: "p", Max: 100, LeaseNs: 60e9, MaxBytes: 1000}); len(r.Messages) != 3 {
		t.Fatalf("a lease of 1,000 bytes of 300-byte messages took %d, want 3", len(r.Messages))
	}
	if r := h.Client("", &Lease{Group: "g", Processor: "p", Max: 100, LeaseNs: 60e9, MaxBytes: 1}); len(r.Messages) != 1 {
		t.Fatalf("a lease bounded below one message took %d, want 1", len(r.Messages))
	}
	if r := h.Client("", &Lease{Group: "g", Processor: "p", Max: 100, LeaseNs: 60e9}); len(r.Messages) != 6 {
		t.Fatalf("an unbounded lease took %d, want the 6 left", len(r.Messages))
	}
	for _, l := range []*Lease{{Group: "g", Processor: "p", Max: 5, LeaseNs: 7}, {Group: "g", Processor: "p", Max: 5, LeaseNs: 7, MaxBytes: 9}} {
		b, _ := l.AppendBinary(nil)
		got, err := Decode(b)
		if err != nil || *got.(*Lease) != *l {
			t.Fatalf("%+v decoded as %+v, %v", l, got, err)
		}
	}
	b, _ := (&Lease{Group: "g", Processor: "p", Max: 5, LeaseNs: 7}).AppendBinary(nil)
	b[0] = tagLeaseBytes
	if _, err := Decode(append(b, 0)); err == nil {
		t.Fatal("a byte-bounded lease with a bound of 0 decoded")
	}
}

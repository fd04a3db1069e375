package sequencer

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine/enginetest"
)

// TestBytesPerMessage measures what one message of the peer's benchmark
// (a 36-byte id, a small payload) costs a partition restored from a
// snapshot, and in the snapshot: unreleased (pending), then released
// (kept for readers), then once consumers have passed it. The figures
// are for docs/BENCHMARKS.md; the bounds only catch a gross regression.
func TestBytesPerMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 20,000 messages")
	}
	const n = 20_000
	h := newHarness(t, 5, 1, Limits{})
	measure := func() (heap int64, size int) {
		snap := h.Machines[0].AppendSnapshot(nil)
		return enginetest.RetainedHeap(func() any {
			m := h.NewMachine(0)
			if err := m.Restore(bytes.Clone(snap)); err != nil { // what the machine keeps of its input counts
				t.Fatal(err)
			}
			return m
		}), len(snap)
	}
	// The group exists (and has a consumer) before the baseline.
	h.Client("", &Publish{Group: "bench", MsgID: "first"})
	r := h.Client("", &Lease{Group: "bench", Processor: "p", Max: 1, LeaseNs: 60e9})
	h.Client("", &Complete{Group: "bench", Seq: r.Messages[0].Seq, Processor: "p"})
	h.Client("", &Commit{Group: "bench", Consumer: "reader", Position: 1})
	heap0, size0 := measure()
	payload := []byte(`{"processingTime":0}`)
	for i := 0; i < n; i += MaxBatch {
		b := &PublishBatch{}
		for k := range MaxBatch {
			b.Msgs = append(b.Msgs, Publish{Group: "bench", MsgID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i+k), Payload: payload})
		}
		if r := h.Client("", b); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	heap1, size1 := measure()
	for done := 0; done < n; {
		r := h.Client("", &Lease{Group: "bench", Processor: "p", Max: MaxLeaseBatch, LeaseNs: 60e9})
		for _, x := range r.Messages {
			h.Client("", &Complete{Group: "bench", Seq: x.Seq, Processor: "p"})
		}
		done += len(r.Messages)
	}
	heap2, size2 := measure()
	if r := h.Client("", &Commit{Group: "bench", Consumer: "reader", Position: n + 1}); r.Outcome != OK {
		t.Fatal(r.Msg)
	}
	heap3, size3 := measure()
	per := func(heap int64, size int) string {
		return fmt.Sprintf("%.0f B in memory, %.0f B in a snapshot", float64(heap-heap0)/n, float64(size-size0)/n)
	}
	t.Logf("per unreleased message: %s; released: %s; read by every consumer: %s", per(heap1, size1), per(heap2, size2), per(heap3, size3))
	if p := float64(heap1-heap0) / n; p > 1024 {
		t.Errorf("an unreleased message costs %.0f B; more than 1 KiB is a regression", p)
	}
	// Purged messages give their memory back: the window's chunks go
	// (the heap figure is too noisy for a bound when other tests'
	// goroutines are still winding down).
	if g := h.Machines[0].groups["bench"]; g.counts[MsgReleased] != 0 || len(g.ids) != 0 || len(g.chunks) > 1 || size3 > size0+16 { // positions take longer varints
		t.Errorf("after every consumer passed: %d released kept, %d ids, %d chunks, snapshot %d B (was %d)",
			g.counts[MsgReleased], len(g.ids), len(g.chunks), size3, size0)
	}
}

// Released output is bounded in bytes: two groups without consumers
// release 1 KiB messages past Limits.MaxOutputBytes, and the partition
// keeps at most that much of them (the newest), purging the oldest first
// across groups; a read from the start says where the output now begins,
// and what it returns is in order; a restored partition counts the same.
func TestOutputBoundedInBytes(t *testing.T) {
	const limit = 64 << 10
	h := newHarness(t, 3, 1, Limits{MaxOutputBytes: limit})
	payload := bytes.Repeat([]byte("x"), 1<<10)
	for i := range 200 {
		for _, g := range []string{"a", "b"} {
			if r := h.Client("", &Publish{Group: g, MsgID: fmt.Sprint(g, i), Payload: payload}); r.Outcome != Created {
				t.Fatal(r.Msg)
			}
			r := h.Client("", &Lease{Group: g, Processor: "p", Max: 1, LeaseNs: 60e9})
			if r := h.Client("", &Complete{Group: g, Seq: r.Messages[0].Seq, Processor: "p"}); r.Outcome != OK {
				t.Fatal(r.Msg)
			}
		}
		if m := h.Machines[0]; m.out > limit {
			t.Fatalf("after %d messages a group, %d bytes of output kept, over %d", i+1, m.out, limit)
		}
	}
	m := h.Machines[0]
	for _, name := range []string{"a", "b"} {
		out := m.Query(ReadOutput{Group: name, After: 0, Limit: 1000}).(*Output)
		if out.Position != 200 || out.FirstKept < 150 || len(out.Messages) == 0 {
			t.Fatalf("%s: position %d, first kept %d, %d read; want the newest of 200 kept", name, out.Position, out.FirstKept, len(out.Messages))
		}
		for i, x := range out.Messages {
			if x.Seq != out.FirstKept+uint64(i) || x.ID != fmt.Sprint(name, x.Seq-1) {
				t.Fatalf("%s: read %d is %d (%s)", name, i, x.Seq, x.ID)
			}
		}
	}
	r := h.NewMachine(0)
	if err := r.Restore(m.AppendSnapshot(nil)); err != nil {
		t.Fatal(err)
	}
	if r.out != m.out {
		t.Fatalf("restored, the partition counts %d bytes of output; it had %d", r.out, m.out)
	}
}

// Unreleased messages are bounded in bytes when the publish carries the
// limit (the API's always do): past it a publish, or a whole batch, is
// refused RESOURCE_EXHAUSTED and changes nothing; releasing frees the
// room; a publish logged without a limit is not bounded.
func TestUnreleasedBoundedInBytes(t *testing.T) {
	h := newHarness(t, 4, 1, Limits{})
	payload := bytes.Repeat([]byte("x"), 1000)
	limit := 3 * pubCost(&Publish{MsgID: "m0", Payload: payload})
	for i := range 3 {
		if r := h.Client("", &Publish{Group: "g", MsgID: fmt.Sprint("m", i), Payload: payload, MaxHeldBytes: limit}); r.Outcome != Created {
			t.Fatalf("publish %d within the limit: %v", i, r.Msg)
		}
	}
	if r := h.Client("", &Publish{Group: "g", MsgID: "m3", Payload: payload, MaxHeldBytes: limit}); r.Outcome != Exhausted || !strings.Contains(r.Msg, "unreleased") {
		t.Fatalf("a publish past the limit: %v %s, want Exhausted", r.Outcome, r.Msg)
	}
	if r := h.Client("", &PublishBatch{Msgs: []Publish{{Group: "g", MsgID: "b1", Payload: []byte("y")}}, MaxHeldBytes: limit}); r.Outcome != Exhausted || !strings.Contains(r.Msg, "nothing was published") {
		t.Fatalf("a batch past the limit: %v %s", r.Outcome, r.Msg)
	}
	// A repeat of a kept id is answered as before, limit or not.
	if r := h.Client("", &Publish{Group: "g", MsgID: "m0", Payload: payload, MaxHeldBytes: limit}); r.Outcome != Same {
		t.Fatalf("a repeated id at the limit: %v %s, want Same", r.Outcome, r.Msg)
	}
	if r := h.Client("", &Publish{Group: "g", MsgID: "old", Payload: payload}); r.Outcome != Created {
		t.Fatalf("a publish without a limit: %v %s", r.Outcome, r.Msg)
	}
	// The three limited ones released: the unlimited one and a new one fit.
	r := h.Client("", &Lease{Group: "g", Processor: "p", Max: 3, LeaseNs: 60e9})
	for _, x := range r.Messages {
		if c := h.Client("", &Complete{Group: "g", Seq: x.Seq, Processor: "p"}); c.Outcome != OK {
			t.Fatal(c.Msg)
		}
	}
	if r := h.Client("", &Publish{Group: "g", MsgID: "m3", Payload: payload, MaxHeldBytes: limit}); r.Outcome != Created {
		t.Fatalf("a publish once one was released: %v %s", r.Outcome, r.Msg)
	}
	h.CheckReplay()
}

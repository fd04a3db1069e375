package jobs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

// TestBytesPerJob measures what one pending job of the peer's load test
// (a 38-byte payload, `{"command":["echo","bench"]}`) costs in a
// partition restored from a snapshot, and in the snapshot; then the same
// once the jobs are done and again once their retention has passed. The
// figures are for docs/BENCHMARKS.md; the bounds only catch a gross
// regression.
func TestBytesPerJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 20,000 jobs")
	}
	const jobs = 20_000
	h := newHarness(t, 5, 1, Limits{MaxJobsPerQueue: jobs})
	measure := func() (heap, objects int64, size int) {
		snap := h.Machines[0].AppendSnapshot(nil)
		heap, objects = enginetest.Retained(func() any {
			m := h.NewMachine(0)
			if err := m.Restore(bytes.Clone(snap)); err != nil { // what the machine keeps of its input counts
				t.Fatal(err)
			}
			return m
		})
		return heap, objects, len(snap)
	}
	heap0, obj0, size0 := measure()
	payload := []byte(`{"command":["echo","bench"]}`)
	for i := range jobs {
		id := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		if r := h.Client("", &Submit{JobID: id, Queue: DefaultQueue, Payload: payload, Priority: int32(i % 10), RetentionNs: 3600e9}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	heap1, obj1, size1 := measure()
	for done := 0; done < jobs; {
		r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: MaxLeaseBatch, LeaseNs: 60e9})
		for _, j := range r.Jobs {
			h.Client("", &Report{JobID: j.ID, Worker: "w", Success: true})
		}
		done += len(r.Jobs)
	}
	heap2, obj2, size2 := measure()
	h.Advance(3600e9 + 1)
	heap3, _, size3 := measure()
	per := func(heap, objects int64, size int) string {
		return fmt.Sprintf("%.0f B and %.2f objects in memory, %.0f B in a snapshot", float64(heap-heap0)/jobs, float64(objects-obj0)/jobs, float64(size-size0)/jobs)
	}
	t.Logf("per pending job: %s; done: %s; after retention: %.0f B in memory, %.0f B in a snapshot",
		per(heap1, obj1, size1), per(heap2, obj2, size2), float64(heap3-heap0)/jobs, float64(size3-size0)/jobs)
	// The same pending jobs as the partition that took them holds them
	// (each submit's id and payload its own, as a decoded command's are).
	_, live := enginetest.Retained(func() any {
		m := NewMachine(Options{OwnsDefault: true, Limits: Limits{MaxJobsPerQueue: jobs}})
		fx := new(engine.Effects)
		for i := range jobs {
			fx.Reset()
			m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1, Cmd: &Submit{JobID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i),
				Queue: DefaultQueue, Payload: bytes.Clone(payload), Priority: int32(i % 10), RetentionNs: 3600e9}}, fx)
		}
		return m
	})
	t.Logf("per pending job as submitted: %.2f objects", float64(live-obj0)/jobs)
	if p := float64(heap1-heap0) / jobs; p > 2048 {
		t.Errorf("a pending job costs %.0f B; more than 2 KiB is a regression", p)
	}
	// An ended job is a record in a shared chunk (ended.go): the
	// collector has no object of its own to mark for it.
	if o := float64(obj2-obj0) / jobs; o > 0.05 {
		t.Errorf("a done job costs %.2f heap objects; it should be a record in a chunk, not objects of its own", o)
	}
	if n := len(h.Machines[0].jobs) + h.Machines[0].ended.len(); n != 0 || heap3-heap0 > jobs*16 {
		t.Errorf("after retention %d jobs remain, %d B more than empty", n, heap3-heap0)
	}
}

// Finished jobs are bounded in bytes as well as in number: with large
// payloads and results, a partition keeps its newest finished jobs up to
// Limits.MaxEndedBytes (past it by at most what one command finished),
// the oldest go before their retention, and a restored partition counts
// the same bytes.
func TestEndedJobsBoundedInBytes(t *testing.T) {
	const limit = 256 << 10
	h := newHarness(t, 9, 1, Limits{MaxEndedBytes: limit})
	big := bytes.Repeat([]byte("x"), 16<<10)
	var ids []string
	for i := range 100 {
		id := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		if r := h.Client("", &Submit{JobID: id, Queue: DefaultQueue, Payload: big, RetentionNs: 3600e9}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
		if r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 60e9}); len(r.Jobs) != 1 {
			t.Fatalf("lease: %v", r.Msg)
		}
		if r := h.Client("", &Report{JobID: id, Worker: "w", Success: true, Result: big}); r.Outcome != OK {
			t.Fatalf("report: %v", r.Msg)
		}
		ids = append(ids, id)
		m := h.Machines[0]
		if m.ended.live > limit+3*int64(len(big)) {
			t.Fatalf("after %d jobs the finished ones hold %d bytes, over the %d allowed and one job", i+1, m.ended.live, limit)
		}
	}
	m := h.Machines[0]
	if m.ended.len() >= len(ids) || m.ended.len() < limit/(4*len(big)) {
		t.Fatalf("%d of %d finished jobs kept under %d bytes", m.ended.len(), len(ids), limit)
	}
	if m.job(ids[0]) != nil || m.job(ids[len(ids)-1]) == nil {
		t.Fatal("the oldest finished job should be gone and the newest kept")
	}
	r := h.NewMachine(0)
	if err := r.Restore(m.AppendSnapshot(nil)); err != nil {
		t.Fatal(err)
	}
	r.endFinished()
	if r.ended.live != m.ended.live {
		t.Fatalf("restored, the partition counts %d bytes of finished jobs; it had %d", r.ended.live, m.ended.live)
	}
}

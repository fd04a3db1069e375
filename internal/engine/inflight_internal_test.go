package engine

import (
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
)

// A batch counts as one slot per inflightSlotBytes of its log bytes, so
// that the partition's slots bound its batches in flight in bytes: as
// many large batches as before (4 of MaxBatchBytes), many more small ones.
func TestSlotsForBatchBytes(t *testing.T) {
	for _, c := range []struct{ bytes, slots int }{
		{0, 1}, {1, 1}, {inflightSlotBytes, 1}, {inflightSlotBytes + 1, 2},
		{MaxBatchBytes, MaxBatchBytes / inflightSlotBytes}, {100 * MaxBatchBytes, maxInflightBatches},
	} {
		if got := slotsFor(c.bytes); got != c.slots {
			t.Errorf("slotsFor(%d) = %d, want %d", c.bytes, got, c.slots)
		}
	}
	if full := maxInflightBatches / slotsFor(MaxBatchBytes); full*MaxBatchBytes > inflightBatchBytes || full < 4 {
		t.Errorf("%d full batches may be in flight: want 4, within %d bytes", full, inflightBatchBytes)
	}
}

// A batch reused after one of many inputs does not keep room for them:
// the partition's idle batches stay within what 16 batches of
// DefaultMaxBatch inputs kept, however many of them there are.
func TestResetDropsRoomForManyInputs(t *testing.T) {
	b := &batch{}
	for i := range DefaultMaxBatch {
		b.reqs = append(b.reqs, &Request{})
		b.offsets = append(b.offsets, i)
	}
	b.entries = make([]cmdlog.Entry, DefaultMaxBatch)
	b.reset()
	if cap(b.reqs)+cap(b.offsets)+cap(b.entries) != 0 {
		t.Fatalf("after a batch of %d inputs the reset batch keeps room for %d requests, %d offsets, %d entries",
			DefaultMaxBatch, cap(b.reqs), cap(b.offsets), cap(b.entries))
	}
	small := &batch{reqs: make([]*Request, 3, keptBatchInputs)}
	small.reset()
	if cap(small.reqs) != keptBatchInputs {
		t.Fatalf("a batch within keptBatchInputs lost its room: cap %d", cap(small.reqs))
	}
	if keptBatchInputs*maxInflightBatches > 16*DefaultMaxBatch {
		t.Fatalf("idle batches may keep room for %d inputs, more than 16 full batches", keptBatchInputs*maxInflightBatches)
	}
}

// Batches are made as first needed, never more than maxInflightBatches
// however many goroutines take them at once, and a taken batch that
// comes back is taken again before a new one is made.
func TestBatchesMadeAsNeeded(t *testing.T) {
	p := &partition{free: make(chan *batch, maxInflightBatches)}
	if p.made.Load() != 0 {
		t.Fatal("a new partition made batches before needing one")
	}
	got := make(chan *batch, 4*maxInflightBatches)
	var wg sync.WaitGroup
	for range 4 * maxInflightBatches {
		wg.Go(func() {
			if b := p.tryTakeBatch(); b != nil {
				got <- b
			}
		})
	}
	wg.Wait()
	close(got)
	if len(got) != maxInflightBatches || p.made.Load() != maxInflightBatches {
		t.Fatalf("%d takers got %d batches, %d made; want %d", 4*maxInflightBatches, len(got), p.made.Load(), maxInflightBatches)
	}
	if b := p.tryTakeBatch(); b != nil {
		t.Fatal("a batch beyond maxInflightBatches")
	}
	first := <-got
	p.free <- first
	if b := p.takeBatch(); b != first || p.made.Load() != maxInflightBatches {
		t.Fatal("a returned batch was not reused")
	}
}

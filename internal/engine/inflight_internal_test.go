package engine

import "testing"

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

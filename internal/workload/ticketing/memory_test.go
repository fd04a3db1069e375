package ticketing

import (
	"testing"

	"github.com/surge-run/surge/internal/engine/enginetest"
)

// TestBytesPerRetainedRecord measures what a retained reservation costs on
// the heap, in the shape of the compat spike: a million reservations of one
// seat over 100,000 seats, so nine in ten end FAILED (sold out). The figure
// is logged (go test -v -run BytesPerRetained); the bound only catches a
// return to the old pointer-per-record form (about 240 B).
func TestBytesPerRetainedRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a million records")
	}
	const n = 1_000_000
	grew := enginetest.RetainedHeap(func() any {
		m := newTestMachine(AreaDef{AreaID: "a", RowCount: 100, ColCount: 1000})
		c := &Reserve{UserID: "user123", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 1}
		for i := range n {
			c.ID = id(i + 1)
			c.ID[15] = byte(i >> 24)
			if r := apply(m, c); r.Outcome != OK {
				t.Fatalf("reservation %d: %+v", i, r)
			}
		}
		return m
	})
	per := float64(grew) / n
	t.Logf("%d records: heap grew by %.1f MB, %.1f B per record", n, float64(grew)/1e6, per)
	if per > 150 {
		t.Errorf("%.1f B per retained record; want at most 150", per)
	}
}

package commerce

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine/enginetest"
)

// TestBytesPerOrder measures what one order of the peer's load test (one
// line item) costs once its saga has ended: the order, its saga, its
// payment and the events of all three and of the product, as held in
// memory by a partition restored from a snapshot (the live state without
// the test harness's log), and in the snapshot. It is the figure
// docs/BENCHMARKS.md quotes; the bound only catches a gross regression.
func TestBytesPerOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10,000 orders")
	}
	perOrder, perSnap, perKept, perKeptSnap := bytesPerOrder(t, 100_000, true)
	t.Logf("per ended order: %.0f B in memory, %.0f B in a snapshot; after its saga's retention %.0f B and %.0f B", perOrder, perSnap, perKept, perKeptSnap)
	if perOrder > 8<<10 {
		t.Errorf("an ended order costs %.0f B in memory; more than 8 KiB is a regression", perOrder)
	}
	if perKept >= perOrder {
		t.Errorf("purging the sagas freed nothing: %.0f B per order before, %.0f B after", perOrder, perKept)
	}
}

// TestBytesPerCancelledOrder: an order cancelled before it was paid (here
// for want of stock) tells its payment key, which keeps a closed-order
// marker until the saga's retention has passed, and nothing after it: no
// more than an order whose saga does not tell it (logged by an older
// build).
func TestBytesPerCancelledOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 20,000 orders")
	}
	perOrder, perSnap, perKept, perKeptSnap := bytesPerOrder(t, 0, true)
	_, _, oldKept, oldKeptSnap := bytesPerOrder(t, 0, false)
	t.Logf("per cancelled order: %.0f B in memory, %.0f B in a snapshot; after its saga's retention %.0f B and %.0f B (%.0f B and %.0f B without ClosePayment)",
		perOrder, perSnap, perKept, perKeptSnap, oldKept, oldKeptSnap)
	if perKept > oldKept+32 || perKeptSnap > oldKeptSnap+8 {
		t.Errorf("a cancelled order keeps %.0f B (%.0f B in a snapshot) after its retention, %.0f B (%.0f B) without ClosePayment: the payment key keeps something for ever",
			perKept, perKeptSnap, oldKept, oldKeptSnap)
	}
}

// bytesPerOrder places 10,000 orders of one unit each of products with
// onHand units, each saga ended before the next, and measures the bytes
// per order in restored partitions and in snapshots, before and after
// the sagas' retention.
func bytesPerOrder(t *testing.T, onHand int64, closePayment bool) (perOrder, perSnap, perKept, perKeptSnap float64) {
	const parts, products, orders = 8, 100, 10_000
	h := newHarness(t, 3, parts)
	for i := range products {
		id := fmt.Sprintf("p%d", i)
		h.Client(ProductKey(id), &CreateProduct{ID: id, SKU: "SKU-" + id, Name: "Product " + id, PriceCents: 999, OnHand: onHand})
	}
	snapshots := func() [][]byte {
		out := make([][]byte, parts)
		for i, m := range h.Machines {
			out[i] = m.AppendSnapshot(nil)
		}
		return out
	}
	measure := func(snaps [][]byte) (heap int64, size int) {
		for _, s := range snaps {
			size += len(s)
		}
		return enginetest.RetainedHeap(func() any {
			restored := make([]*Machine, parts)
			for i, s := range snaps {
				restored[i] = NewMachine()
				if err := restored[i].Restore(bytes.Clone(s)); err != nil { // what the machine keeps of its input counts
					t.Fatal(err)
				}
			}
			return restored
		}), size
	}
	heap0, size0 := measure(snapshots())
	for i := range orders {
		id := fmt.Sprintf("order-%08d-0000-0000-0000-000000000000", i)
		c := &CreateOrder{OrderID: id, CustomerID: fmt.Sprintf("c%d", i%100), PaymentMethod: "CREDIT_CARD", DeadlineNs: DefaultDeadline, RetentionNs: 1e9, ClosePayment: closePayment,
			ShippingAddress: "1 Main Street", Items: []LineItem{{ProductID: fmt.Sprintf("p%d", i%products), Quantity: 1, UnitPriceCents: 1000}}}
		if res := h.Client(OrderKey(id), c); res.Outcome != Created {
			t.Fatalf("%+v", res)
		}
		for h.Deliver() {
		}
	}
	heap1, size1 := measure(snapshots())
	// Past the saga retention: the sagas and markers are purged, the
	// orders, payments and events stay.
	h.Drain()
	h.Advance(2e9)
	h.Drain()
	heap2, size2 := measure(snapshots())
	return float64(heap1-heap0) / orders, float64(size1-size0) / orders, float64(heap2-heap0) / orders, float64(size2-size0) / orders
}

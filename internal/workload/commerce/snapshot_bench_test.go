package commerce

import (
	"fmt"
	"testing"
)

// BenchmarkSnapshot encodes one partition holding 20,000 ended orders of
// the load test's shape, forked as the engine does.
func BenchmarkSnapshot(b *testing.B) {
	h := newHarness(b, 1, 1)
	for i := range 100 {
		h.Client(ProductKey(fmt.Sprint("p", i)), &CreateProduct{ID: fmt.Sprint("p", i), SKU: fmt.Sprint("SKU-", i), Name: "product", PriceCents: 1000, OnHand: 1 << 30})
		h.Client(CustomerKey(fmt.Sprint("c", i)), &CreateCustomer{ID: fmt.Sprint("c", i), Email: "a@b.c", Name: "Ann"})
	}
	for i := range 20_000 {
		id := fmt.Sprintf("order-%08d-0000-0000-0000-000000000000", i)
		h.Client(OrderKey(id), &CreateOrder{OrderID: id, CustomerID: fmt.Sprint("c", i%100), PaymentMethod: "CREDIT_CARD", DeadlineNs: DefaultDeadline,
			ShippingAddress: "1 Main Street", Items: []LineItem{{ProductID: fmt.Sprint("p", i%100), Quantity: 1, UnitPriceCents: 1000}}})
		for h.Deliver() {
		}
	}
	m := h.Machines[0]
	size := len(m.AppendSnapshot(nil))
	b.ReportMetric(float64(size), "bytes/snapshot")
	b.Run("fork", func(b *testing.B) {
		for b.Loop() {
			m.ForkSnapshot()
		}
	})
	b.Run("encode", func(b *testing.B) {
		f := m.ForkSnapshot()
		for b.Loop() {
			f(make([]byte, 0, size))
		}
	})
}

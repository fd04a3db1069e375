package commerce

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// A saga's payment request takes a captured payment made directly for
// its order that charged the same, and refunds one it cannot take (its
// answer cancels the order). A request logged before requests could take
// one (its old tag) is answered as it was then: it takes none, so the
// answer that receivers already numbered replays the same; the refund is
// the only change.
func TestPaymentRequestTakesADirectPayment(t *testing.T) {
	for _, tc := range []struct {
		name       string
		req        ProcessPaymentForOrder
		paid       CreatePayment
		saga       bool
		wantStatus string
	}{
		{"same charge", ProcessPaymentForOrder{AmountCents: 1100, Take: true}, CreatePayment{AmountCents: 1100, Currency: "USD"}, true, PaymentCaptured},
		{"other amount", ProcessPaymentForOrder{AmountCents: 1100, Take: true}, CreatePayment{AmountCents: 1000, Currency: "USD"}, false, PaymentRefunded},
		{"other currency", ProcessPaymentForOrder{AmountCents: 1100, Take: true}, CreatePayment{AmountCents: 1100, Currency: "EUR"}, false, PaymentRefunded},
		{"logged before", ProcessPaymentForOrder{AmountCents: 1100}, CreatePayment{AmountCents: 1100, Currency: "USD"}, false, PaymentRefunded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, 2)
			tc.paid.OrderID, tc.paid.CustomerID, tc.paid.Method = "o1", "c1", "CREDIT_CARD"
			if res := h.Client(PaymentKey("o1"), &tc.paid); res.Outcome != Created || res.Payment.Status != PaymentCaptured {
				t.Fatalf("direct payment: %+v", res)
			}
			tc.req.OrderID, tc.req.CustomerID, tc.req.Method = "o1", "c1", "CREDIT_CARD"
			data, err := tc.req.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			if res := h.Apply(h.Part(PaymentKey("o1")), engine.FromMessage, "", data); res.Outcome != OK {
				t.Fatalf("payment request: %+v", res)
			}
			p := h.Machines[h.Part(PaymentKey("o1"))].payments["o1"]
			if p.Saga != tc.saga || p.Status != tc.wantStatus {
				t.Fatalf("the direct payment is %s (saga %v), want %s (saga %v)", p.Status, p.Saga, tc.wantStatus, tc.saga)
			}
		})
	}
}

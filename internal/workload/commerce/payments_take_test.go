package commerce

import (
	"fmt"
	"strings"
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

// A client that pays for its order directly right after placing it gets
// the payment back when the order is cancelled before its saga asked for
// the payment: by a cancel, a product out of stock or the deadline. The
// order's partition cannot know of such a payment, so a saga created
// with ClosePayment always tells the payment's partition as it ends; a
// later direct payment is refused. An order logged before ClosePayment
// ends as it did then: no message to the payment's partition (its
// receivers have numbered what it sent), and the payment stays.
func TestCancelRefundsADirectPayment(t *testing.T) {
	for _, how := range []string{"cancel", "stock", "deadline"} {
		for _, closes := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/close=%v", how, closes), func(t *testing.T) {
				h := newHarness(t, 3, 4)
				onHand := int64(5)
				if how == "stock" {
					onHand = 0
				}
				if res := h.Client(ProductKey("p1"), &CreateProduct{ID: "p1", SKU: "S1", Name: "Pen", PriceCents: 1000, OnHand: onHand}); res.Outcome != Created {
					t.Fatalf("product: %+v", res)
				}
				o := &CreateOrder{OrderID: "o1", CustomerID: "c1", Items: []LineItem{{ProductID: "p1", Quantity: 1, UnitPriceCents: 1000}},
					PaymentMethod: "CREDIT_CARD", DeadlineNs: DefaultDeadline, RetentionNs: 3600e9, ClosePayment: closes}
				res := h.Client(OrderKey("o1"), o)
				if res.Outcome != Created {
					t.Fatalf("order: %+v", res)
				}
				pay := &CreatePayment{OrderID: "o1", CustomerID: "c1", AmountCents: res.Order.Total, Currency: sagaCurrency, Method: "CREDIT_CARD"}
				if res := h.Client(PaymentKey("o1"), pay); res.Outcome != Created || res.Payment.Status != PaymentCaptured {
					t.Fatalf("direct payment: %+v", res)
				}
				switch how {
				case "cancel":
					if res := h.Client(OrderKey("o1"), &CancelOrder{OrderID: "o1", Reason: "changed my mind", CancelledBy: "customer"}); res.Outcome != OK {
						t.Fatalf("cancel: %+v", res)
					}
				case "deadline":
					h.Advance(DefaultDeadline) // before the product answers
				}
				sent := 0
				for _, q := range h.Queues {
					for _, s := range q {
						if s.Key == PaymentKey("o1") {
							sent++
						}
					}
				}
				h.Drain()
				if o, _ := h.order("o1"); o.Status != OrderCancelled {
					t.Fatalf("order %s, want CANCELLED", o.Status)
				}
				want := PaymentRefunded
				if !closes {
					want = PaymentCaptured
				}
				if p := h.payment("o1"); p.Status != want || p.Saga {
					t.Fatalf("the direct payment is %s (saga %v), want %s", p.Status, p.Saga, want)
				}
				if how != "stock" && (sent == 1) != closes {
					t.Fatalf("%d messages to the payment's partition on the way after the %s", sent, how)
				}
				h.CheckReplay()
			})
		}
	}
}

// A saga created with ClosePayment that ends before any payment closes
// the order at the payment's partition: a direct payment that comes after
// is refused (until the marker's retention has passed).
func TestClosedOrderRefusesADirectPayment(t *testing.T) {
	h := newHarness(t, 5, 4)
	if res := h.Client(ProductKey("p1"), &CreateProduct{ID: "p1", SKU: "S1", Name: "Pen", PriceCents: 1000}); res.Outcome != Created {
		t.Fatalf("product: %+v", res)
	}
	res := h.Client(OrderKey("o1"), &CreateOrder{OrderID: "o1", CustomerID: "c1", Items: []LineItem{{ProductID: "p1", Quantity: 1, UnitPriceCents: 1000}},
		PaymentMethod: "CREDIT_CARD", DeadlineNs: DefaultDeadline, RetentionNs: 3600e9, ClosePayment: true})
	if res.Outcome != Created {
		t.Fatalf("order: %+v", res)
	}
	for h.Deliver() { // out of stock: cancelled (no timer fires: the marker stays)
	}
	if o, _ := h.order("o1"); o.Status != OrderCancelled {
		t.Fatalf("order %s, want CANCELLED", o.Status)
	}
	pay := &CreatePayment{OrderID: "o1", CustomerID: "c1", AmountCents: res.Order.Total, Currency: sagaCurrency, Method: "CREDIT_CARD"}
	if res := h.Client(PaymentKey("o1"), pay); res.Outcome != Conflict || !strings.Contains(res.Msg, "cancelled") {
		t.Fatalf("direct payment for a cancelled order: %+v", res)
	}
}

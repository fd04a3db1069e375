package commerce

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

func setup(t *testing.T, stock map[string]int64) *harness {
	t.Helper()
	h := newHarness(t, 7, 4)
	for id, n := range stock {
		if res := h.Client(ProductKey(id), &CreateProduct{ID: id, SKU: id, Name: id, PriceCents: 999, OnHand: n}); res.Outcome != Created {
			t.Fatalf("%+v", res)
		}
	}
	return h
}

func order(id string, method string, items ...LineItem) *CreateOrder {
	return &CreateOrder{OrderID: id, CustomerID: "c1", Items: items, PaymentMethod: method, DeadlineNs: DefaultDeadline}
}

func TestSagaConfirmsAcrossPartitions(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5, "b": 5})
	res := h.Client(OrderKey("o1"), order("o1", "CREDIT_CARD",
		LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 1000},
		LineItem{ProductID: "b", Quantity: 1, UnitPriceCents: 999},
		LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 1000}))
	// 29.99 subtotal; 10 % is 2.999, half-up 3.00.
	if o := res.Order; res.Outcome != Created || o.Subtotal != 2999 || o.Tax != 300 || o.Total != 3299 {
		t.Fatalf("%+v", res.Order)
	}
	if h.Part(ProductKey("a")) == h.Part(ProductKey("b")) && h.Part(ProductKey("a")) == h.Part(OrderKey("o1")) {
		t.Log("all keys in one partition; the saga still crosses keys")
	}
	for h.Deliver() {
	}
	o, s := h.order("o1")
	if o.Status != OrderConfirmed || s.Status != SagaCompleted || o.PaymentID != "PAY-o1" {
		t.Fatalf("order %s saga %s payment %q", o.Status, s.Status, o.PaymentID)
	}
	// The peer's stock model: a confirmed order's units stay reserved.
	if a, b := h.product("a"), h.product("b"); a.OnHand != 5 || a.Reserved != 2 || b.OnHand != 5 || b.Reserved != 1 {
		t.Fatalf("a %d/%d b %d/%d", a.OnHand, a.Reserved, b.OnHand, b.Reserved)
	}
	if p := h.payment("o1"); p.Status != PaymentCaptured || p.AmountCents != 3299 {
		t.Fatalf("%+v", p)
	}
	if h.TimersLeft() != 0 {
		t.Fatal("the deadline timer of a completed saga is still armed")
	}
	// The product got one ReserveForOrder for its two lines.
	evs := h.Machines[h.Part(ProductKey("a"))].Query(&Events{Key: ProductKey("a")}).([]Event)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if want := "ProductCreated StockReserved"; join(types) != want {
		t.Fatalf("events %q, want %q", join(types), want)
	}
	if last := h.Machines[h.Part(ProductKey("a"))].Query(&Events{Key: ProductKey("a"), Limit: 1}).([]Event); len(last) != 1 || last[0].Seq != 2 {
		t.Fatalf("limit 1 gives %+v, want the newest", last)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// The deadline passes before any product answered: the order is
// cancelled at once, and the reservations that are made afterwards are
// released because the release follows the reserve on the same pair.
func TestDeadlineCompensatesLateReservations(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5, "b": 5})
	c := order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 2, UnitPriceCents: 100}, LineItem{ProductID: "b", Quantity: 1, UnitPriceCents: 100})
	c.DeadlineNs = 5 * ms
	h.Client(OrderKey("o1"), c)
	h.Advance(5 * ms)
	o, s := h.order("o1")
	if o.Status != OrderCancelled || s.Status != SagaTimedOut {
		t.Fatalf("order %s saga %s", o.Status, s.Status)
	}
	h.Drain()
	for _, id := range []string{"a", "b"} {
		if p := h.product(id); p.Reserved != 0 || p.OnHand != 5 || len(p.resv) != 0 {
			t.Fatalf("product %s: onHand %d reserved %d %v", id, p.OnHand, p.Reserved, p.resv)
		}
	}
	if h.payment("o1") != nil {
		t.Fatal("a payment was taken for a timed-out order")
	}
}

// The deadline passes while the payment is on its way: it is captured and
// then refunded, and the order stays cancelled.
func TestDeadlineRefundsACapturedPayment(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5})
	c := order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100})
	c.DeadlineNs = 5 * ms
	h.Client(OrderKey("o1"), c)
	h.Deliver() // ReserveForOrder
	h.Deliver() // StockReserved → ProcessPaymentForOrder sent
	if _, s := h.order("o1"); !s.paymentAsked {
		t.Fatal("payment not asked")
	}
	h.Advance(5 * ms)
	h.Drain()
	o, s := h.order("o1")
	if o.Status != OrderCancelled || s.Status != SagaTimedOut {
		t.Fatalf("order %s saga %s", o.Status, s.Status)
	}
	if p := h.payment("o1"); p == nil || p.Status != PaymentRefunded {
		t.Fatalf("payment %+v, want REFUNDED", p)
	}
	if p := h.product("a"); p.OnHand != 5 || p.Reserved != 0 {
		t.Fatalf("onHand %d reserved %d", p.OnHand, p.Reserved)
	}
}

// The last unit: a saga and a direct reservation race; one wins, and the
// loser's order is cancelled with nothing left reserved.
func TestNoOversellBetweenSagaAndDirectReserve(t *testing.T) {
	h := setup(t, map[string]int64{"a": 1})
	h.Client(OrderKey("o1"), order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}))
	if res := h.Client(ProductKey("a"), &ReserveStock{ProductID: "a", OrderID: "perftest-x", Quantity: 1}); res.Outcome != OK {
		t.Fatalf("%+v", res)
	}
	h.Drain()
	o, s := h.order("o1")
	if o.Status != OrderCancelled || s.Status != SagaCompensated {
		t.Fatalf("order %s saga %s", o.Status, s.Status)
	}
	if p := h.product("a"); p.Reserved != 1 || p.Available() != 0 || p.Reservation("perftest-x") != 1 {
		t.Fatalf("reserved %d available %d", p.Reserved, p.Available())
	}
	if res := h.Client(ProductKey("a"), &ReserveStock{ProductID: "a", OrderID: "perftest-y", Quantity: 1}); res.Outcome != Conflict {
		t.Fatalf("reserve past the stock: %+v", res)
	}
}

func TestDeclinedPaymentCompensates(t *testing.T) {
	for _, c := range []*CreateOrder{
		order("o1", "BITCOIN", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}),
		order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: MaxPaymentCents}), // + tax: over the limit
	} {
		h := setup(t, map[string]int64{"a": 5})
		h.Client(OrderKey("o1"), c)
		h.Drain()
		o, s := h.order("o1")
		if o.Status != OrderCancelled || s.Status != SagaCompensated {
			t.Fatalf("order %s saga %s", o.Status, s.Status)
		}
		if p := h.payment("o1"); p == nil || p.Status != PaymentFailedSt || p.FailureReason == "" {
			t.Fatalf("payment %+v", p)
		}
		if p := h.product("a"); p.Reserved != 0 || p.OnHand != 5 {
			t.Fatalf("reserved %d onHand %d", p.Reserved, p.OnHand)
		}
	}
}

// Saga messages and the deadline cannot come from a client: a forged
// PaymentProcessed would confirm an order nobody paid for.
func TestClientCannotForgeSagaMessages(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5})
	h.Client(OrderKey("o1"), order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}))
	h.Deliver()
	h.Deliver()
	for _, c := range []engine.Command{&PaymentProcessed{OrderID: "o1", PaymentID: "PAY-o1"}, &SagaDeadline{OrderID: "o1"}, &StockFailed{OrderID: "o1", ProductID: "a"}} {
		logged := len(h.Log[h.Part(OrderKey("o1"))])
		if res := h.Client(OrderKey("o1"), c); res.Outcome != Invalid {
			t.Fatalf("%T from a client: %+v", c, res)
		}
		if len(h.Log[h.Part(OrderKey("o1"))]) != logged {
			t.Fatalf("%T from a client was logged", c)
		}
	}
	if o, _ := h.order("o1"); o.Status != OrderPending {
		t.Fatalf("order %s", o.Status)
	}
}

func TestManualRefund(t *testing.T) {
	h := setup(t, nil)
	h.Client(OrderKey("o1"), order("o1", "CREDIT_CARD", LineItem{ProductID: "none", Quantity: 1, UnitPriceCents: 100}))
	pay := func(order string, amount int64) *Result {
		return h.Client(PaymentKey(order), &CreatePayment{OrderID: order, CustomerID: "c1", AmountCents: amount, Currency: "EUR", Method: "CREDIT_CARD"})
	}
	if res := pay("d1", 500); res.Outcome != Created || res.Payment.Status != PaymentCaptured || res.Payment.ID != "PAY-d1" {
		t.Fatalf("%+v", res)
	}
	if res := pay("d1", 500); res.Outcome != Conflict {
		t.Fatalf("second payment for one order: %+v", res)
	}
	if res := pay("d2", MaxPaymentCents+1); res.Outcome != Created || res.Payment.Status != PaymentFailedSt {
		t.Fatalf("%+v", res)
	}
	refund := func(id string) Outcome {
		return h.Client(PaymentKey(id[4:]), &RefundPayment{PaymentID: id, Reason: "r"}).Outcome
	}
	if got := refund("PAY-d1"); got != OK {
		t.Fatalf("refund of a captured payment: %d", got)
	}
	if got := refund("PAY-d1"); got != Conflict {
		t.Fatalf("second refund: %d", got)
	}
	if got := refund("PAY-d2"); got != Conflict {
		t.Fatalf("refund of a FAILED payment: %d", got)
	}
	if got := refund("PAY-nope"); got != NotFound {
		t.Fatalf("refund of an unknown payment: %d", got)
	}
	if res := h.Client(PaymentKey("d3"), &CreatePayment{OrderID: "d3", CustomerID: "c1", AmountCents: 1, Currency: "eur"}); res.Outcome != Invalid {
		t.Fatalf("lower-case currency: %+v", res)
	}
}

func TestQueries(t *testing.T) {
	h := newHarness(t, 1, 1)
	m := h.Machines[0]
	h.Client("", &CreateCustomer{ID: "c1", Email: "a@b.c", Name: "Ann"})
	if res := h.Client("", &CreateCustomer{ID: "c2", Email: "nope", Name: "Bob"}); res.Outcome != Invalid {
		t.Fatalf("bad email: %+v", res)
	}
	if res := h.Client("", &SetCustomerStatus{ID: "c1", Status: CustomerClosed, Reason: "gone"}); res.Outcome != OK {
		t.Fatalf("%+v", res)
	}
	if res := h.Client("", &SetCustomerStatus{ID: "c1", Status: CustomerActive}); res.Outcome != Conflict {
		t.Fatalf("reopening a closed customer: %+v", res)
	}
	h.Client("", &CreateProduct{ID: "a", SKU: "a", Name: "a", PriceCents: 100, OnHand: 9})
	h.Client("", order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}))
	h.Client("", order("o2", "BITCOIN", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}))
	h.Drain()
	if got := m.Query(&ListSagas{Status: SagaCompleted}).([]Saga); len(got) != 1 || got[0].ID != "o1" {
		t.Fatalf("completed sagas %+v", got)
	}
	if got := m.Query(&ListSagas{Type: SagaType, Limit: 1}).([]Saga); len(got) != 1 {
		t.Fatalf("limit: %d sagas", len(got))
	}
	if got := m.Query(&OrdersByCustomer{CustomerID: "c1"}).([]Order); len(got) != 2 {
		t.Fatalf("orders of c1: %d", len(got))
	}
	if p := m.Query(&GetPayment{ID: "PAY-o1"}).(*Payment); p == nil || p.OrderID != "o1" {
		t.Fatalf("%+v", p)
	}
	if p := m.Query(&GetPayment{ID: "o1"}).(*Payment); p != nil {
		t.Fatal("a payment id without its prefix was found")
	}
	// Copies: changing an answer must not change the state.
	o := m.Query(&GetOrder{ID: "o1"}).(*Order)
	o.Items[0].Quantity = 99
	if m.orders["o1"].Items[0].Quantity != 1 {
		t.Fatal("a query answer shares memory with the state")
	}
	if c := m.Query(&GetCustomer{ID: "zz"}).(*Customer); c != nil {
		t.Fatal("unknown customer found")
	}
	if got := m.Query(&ListCustomers{Limit: 10}).([]Customer); len(got) != 1 || got[0].Status != CustomerClosed {
		t.Fatalf("%+v", got)
	}
}

// TestEventHistoryIsBounded: a product that every order touches keeps at
// most 2 × MaxEventsPerEntity events, the newest, with sequence numbers
// that go on counting; replay and snapshot agree.
func TestEventHistoryIsBounded(t *testing.T) {
	h := setup(t, map[string]int64{"a": 1 << 30})
	const orders = 1500 // two product events each (reserved, then released by a cancel): 3,001 with the creation
	for i := range orders {
		id := fmt.Sprintf("o%d", i)
		h.Client(OrderKey(id), order(id, "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}))
		for h.Deliver() {
		}
		h.Client(OrderKey(id), &CancelOrder{OrderID: id, Reason: "test", CancelledBy: "test"})
		for h.Deliver() {
		}
	}
	evs := h.Machines[h.Part(ProductKey("a"))].Query(&Events{Key: ProductKey("a"), Limit: 1 << 20}).([]Event)
	if len(evs) < MaxEventsPerEntity || len(evs) > 2*MaxEventsPerEntity {
		t.Fatalf("%d events kept, want %d to %d", len(evs), MaxEventsPerEntity, 2*MaxEventsPerEntity)
	}
	for i, e := range evs {
		if want := uint64(1+2*orders) - uint64(len(evs)-1-i); e.Seq != want {
			t.Fatalf("event %d has sequence %d, want %d", i, e.Seq, want)
		}
	}
	h.CheckReplay()
}

// TestCancelConfirmedOrder: a CONFIRMED order cancelled by hand gives its
// reserved units back (quantityOnHand never moved) and its captured
// payment is refunded; the saga stays COMPLETED and a second cancel
// changes nothing.
func TestCancelConfirmedOrder(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5, "b": 5})
	h.Client(OrderKey("o1"), order("o1", "CREDIT_CARD",
		LineItem{ProductID: "a", Quantity: 2, UnitPriceCents: 100}, LineItem{ProductID: "b", Quantity: 1, UnitPriceCents: 100},
		LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}))
	h.Drain()
	if o, _ := h.order("o1"); o.Status != OrderConfirmed {
		t.Fatalf("order %s", o.Status)
	}
	// The confirmation still sends each product a CommitForOrder, as older
	// builds did, so their logs replay with the same message sequence.
	for _, id := range []string{"a", "b"} {
		commits := 0
		for _, in := range h.Log[h.Part(ProductKey(id))] {
			if c, _ := Decode(in.Data); c != nil {
				if cm, ok := c.(*CommitForOrder); ok && cm.ProductID == id {
					commits++
				}
			}
		}
		if commits != 1 {
			t.Fatalf("product %s got %d CommitForOrder, want 1", id, commits)
		}
	}
	res := h.Client(OrderKey("o1"), &CancelOrder{OrderID: "o1", Reason: "changed my mind", CancelledBy: "customer"})
	if res.Outcome != OK || res.Order.Status != OrderCancelled || res.Order.Reason != "changed my mind" || res.Order.CancelledBy != "customer" {
		t.Fatalf("cancel: %+v", res)
	}
	h.Drain()
	for id, want := range map[string]string{"a": "ProductCreated StockReserved StockReleased", "b": "ProductCreated StockReserved StockReleased"} {
		p := h.product(id)
		if p.OnHand != 5 || p.Reserved != 0 || len(p.resv) != 0 {
			t.Fatalf("product %s: onHand %d reserved %d %v", id, p.OnHand, p.Reserved, p.resv)
		}
		var types []string
		for _, e := range h.Machines[h.Part(ProductKey(id))].Query(&Events{Key: ProductKey(id)}).([]Event) {
			types = append(types, e.Type)
		}
		if join(types) != want {
			t.Fatalf("product %s events %q, want %q", id, join(types), want)
		}
	}
	if p := h.payment("o1"); p.Status != PaymentRefunded {
		t.Fatalf("payment %+v, want REFUNDED", p)
	}
	if o, s := h.order("o1"); o.Status != OrderCancelled || s.Status != SagaCompleted {
		t.Fatalf("order %s saga %s", o.Status, s.Status)
	}
	if res := h.Client(OrderKey("o1"), &CancelOrder{OrderID: "o1", Reason: "again", CancelledBy: "customer"}); res.Outcome != Same {
		t.Fatalf("second cancel: %+v", res)
	}
	h.CheckReplay()
}

// TestSagaVerifiesUnknownCustomer: an order the API accepted for a
// customer it did not find is cancelled by its saga (COMPENSATED, the
// reason naming the customer, its stock released, nothing paid) unless
// the customer exists by the time the saga asks.
func TestSagaVerifiesUnknownCustomer(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5})
	c := order("o1", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 2, UnitPriceCents: 100})
	c.CustomerID, c.VerifyCustomer = "ghost", true
	if data, _ := c.AppendBinary(nil); data[0] != tagCreateOrderVerify {
		t.Fatalf("tag %d", data[0])
	}
	if data, _ := order("x", "CREDIT_CARD").AppendBinary(nil); data[0] != tagCreateOrder {
		t.Fatalf("an order without the flag is tagged %d, as before", data[0])
	}
	if res := h.Client(OrderKey("o1"), c); res.Outcome != Created || res.Order.Status != OrderPending {
		t.Fatalf("%+v", res)
	}
	h.Drain()
	o, s := h.order("o1")
	if o.Status != OrderCancelled || s.Status != SagaCompensated || o.Reason != `customer "ghost" not found` {
		t.Fatalf("order %s (%q) saga %s", o.Status, o.Reason, s.Status)
	}
	if p := h.product("a"); p.Reserved != 0 || p.OnHand != 5 {
		t.Fatalf("onHand %d reserved %d", p.OnHand, p.Reserved)
	}
	if h.payment("o1") != nil {
		t.Fatal("an order of an unknown customer was paid")
	}

	h.Client(CustomerKey("late"), &CreateCustomer{ID: "late", Email: "l@example.com", Name: "Late"})
	c = order("o2", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100})
	c.CustomerID, c.VerifyCustomer = "late", true
	h.Client(OrderKey("o2"), c)
	h.Drain()
	o, s = h.order("o2")
	var steps []string
	for _, st := range s.Steps {
		steps = append(steps, st.Name()+":"+st.Status())
	}
	if o.Status != OrderConfirmed || !strings.Contains(join(steps), "CUSTOMER_VERIFICATION:COMPLETED") {
		t.Fatalf("order %s steps %v", o.Status, steps)
	}
	h.CheckReplay()
}

// TestCancelOnOldSnapshot: snapshots written by an older build
// (testdata/v2-snap-*.bin, two partitions), whose confirmed orders had
// their units committed, load and read as written (those units sold);
// cancelling such an order refunds it and puts its units back into
// quantityOnHand.
func TestCancelOnOldSnapshot(t *testing.T) {
	h := newHarness(t, 3, 2)
	for p := range 2 {
		b, err := os.ReadFile(fmt.Sprintf("testdata/v2-snap-%d.bin", p))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Machines[p].Restore(b); err != nil {
			t.Fatal(err)
		}
	}
	// p0 was created with 5; order-0, -3 and -6 bought one each.
	if p := h.product("p0"); p.OnHand != 2 || p.Reserved != 0 {
		t.Fatalf("p0 reads onHand %d reserved %d, want 2 and 0", p.OnHand, p.Reserved)
	}
	for _, id := range []string{"order-0", "order-3", "order-6"} {
		if o, _ := h.order(id); o == nil || o.Status != OrderConfirmed {
			t.Fatalf("%s: %+v", id, o)
		}
		if res := h.Client(OrderKey(id), &CancelOrder{OrderID: id, Reason: "returned", CancelledBy: "shop"}); res.Outcome != OK {
			t.Fatalf("cancel %s: %+v", id, res)
		}
	}
	h.Drain()
	if p := h.product("p0"); p.OnHand != 5 || p.Reserved != 0 {
		t.Fatalf("p0 after the cancels: onHand %d reserved %d, want 5 and 0", p.OnHand, p.Reserved)
	}
	for _, id := range []string{"order-0", "order-3", "order-6"} {
		if p := h.payment(id); p.Status != PaymentRefunded {
			t.Fatalf("%s: payment %+v", id, p)
		}
	}
	// A new order on the old state takes the peer's model.
	h.Client(CustomerKey("c0"), &CreateCustomer{ID: "c0", Email: "c0@x.io", Name: "Ann c0"})
	h.Client(OrderKey("new"), &CreateOrder{OrderID: "new", CustomerID: "c0", Items: []LineItem{{ProductID: "p0", Quantity: 2, UnitPriceCents: 100}}, PaymentMethod: "CREDIT_CARD", DeadlineNs: DefaultDeadline})
	h.Drain()
	if o, _ := h.order("new"); o.Status != OrderConfirmed {
		t.Fatalf("new order %s", o.Status)
	}
	if p := h.product("p0"); p.OnHand != 5 || p.Reserved != 2 {
		t.Fatalf("p0 after a new order: onHand %d reserved %d, want 5 and 2", p.OnHand, p.Reserved)
	}
}

package commerce

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire"
)

// model is what the test knows independently of the machines: the stock
// it put in and the direct reservations it made, so the machines' numbers
// are checked against something they did not compute.
type model struct {
	initial    map[string]int64            // product → quantityOnHand at creation
	replenish  map[string]int64            // product → units added
	direct     map[string]map[string]int64 // product → order id → live direct reservation
	orders     map[string]*CreateOrder
	doomed     map[string]string // order → why it can never be confirmed
	taken      map[string]bool   // orders paid directly as their saga would: its payment if it comes to it
	asked      map[string]bool   // orders whose saga's payment request was applied
	payments   []string          // direct payments' order ids
	products   []string
	stats      *stats
	sagaOrders []string
	// What the model saw end, from the machines' notes and replies (not
	// from their purge queues): each saga's final status and time, and
	// per partition what it must purge, in the order it ended.
	ended  map[string]ending
	queued [][]queuedPurge
	ghosts []string // orders that never existed, sent a RefundForOrder
	// afterConfirm: orders cancelled by hand once CONFIRMED (their saga
	// stays COMPLETED).
	afterConfirm map[string]bool
	// closed: orders whose RefundForOrder the payment's partition
	// applied; late: those paid directly after it (once its marker was
	// purged), which nothing refunds.
	closed, late map[string]bool
}

type ending struct {
	status string
	at     int64
}

// queuedPurge: the saga (marker: the closed-order marker) of id is due at at.
type queuedPurge struct {
	id     string
	marker bool
	at     int64
}

type stats struct {
	confirmed, cancelled, timedOut, compensated, steps int
	sagasPurged, sagasKept, markersPurged, heldBack    int
	cancelledConfirmed, unknownCustomer, paidDirectly  int
	refundedOnClose                                    int
}

// watch has the model note every saga ending (OrderChanged) and every
// closed-order marker set (a RefundForOrder applied with no payment), and
// queue their purges when they have a retention.
func (md *model) watch(h *harness) {
	md.ended = map[string]ending{}
	md.taken, md.asked = map[string]bool{}, map[string]bool{}
	md.closed, md.late = map[string]bool{}, map[string]bool{}
	md.queued = make([][]queuedPurge, h.N)
	h.OnApply = func(p int, cmd engine.Command, res *Result, notes []any) {
		for _, n := range notes {
			oc, ok := n.(OrderChanged)
			if !ok {
				continue
			}
			if _, dup := md.ended[oc.OrderID]; dup {
				h.T.Fatalf("saga %s ended twice", oc.OrderID)
			}
			md.ended[oc.OrderID] = ending{status: oc.SagaStatus, at: h.Now}
			if ret := md.orders[oc.OrderID].RetentionNs; ret > 0 {
				md.queued[p] = append(md.queued[p], queuedPurge{id: oc.OrderID, at: h.Now + ret})
			}
		}
		if c, ok := cmd.(*ProcessPaymentForOrder); ok {
			md.asked[c.OrderID] = true
		}
		if c, ok := cmd.(*RefundForOrder); ok {
			md.closed[c.OrderID] = true
			pay := h.Machines[p].payments[c.OrderID]
			if res.Outcome == OK && pay == nil && c.RetentionNs > 0 {
				md.queued[p] = append(md.queued[p], queuedPurge{id: c.OrderID, marker: true, at: h.Now + c.RetentionNs})
			}
			if res.Outcome == OK && pay != nil && !pay.Saga && !md.asked[c.OrderID] {
				md.stats.refundedOnClose++
			}
		}
	}
}

// checkPurges: per partition, the entries of the model's queue up to the
// first one not yet due are gone, and that one and all behind it remain.
// A saga is thus never purged before its time, and one whose time has
// passed remains only while an entry queued before it (made under a
// longer retention) is not due yet. Sagas kept for ever remain.
func checkPurges(h *harness, md *model, end bool) {
	h.T.Helper()
	for p, q := range md.queued {
		m := h.Machines[p]
		blocked := false
		for _, e := range q {
			due := !blocked && e.at <= h.Now
			blocked = blocked || !due
			var present bool
			if e.marker {
				present = m.closedOrders[e.id]
			} else {
				present = m.sagas[e.id] != nil
			}
			switch {
			case present && due:
				h.T.Fatalf("partition %d: %+v is due at %d but not purged", p, e, h.Now)
			case !present && !due:
				h.T.Fatalf("partition %d: %+v purged before its time (now %d)", p, e, h.Now)
			case end && present:
				h.T.Fatalf("partition %d: %+v still there after everything fired", p, e)
			case end && e.marker:
				md.stats.markersPurged++
			case end:
				md.stats.sagasPurged++
			case present && e.at <= h.Now:
				md.stats.heldBack++
			}
		}
	}
	for id, e := range md.ended {
		if md.orders[id].RetentionNs == 0 {
			if _, s := h.order(id); s == nil || s.Status != e.status {
				h.T.Fatalf("saga %s (kept for ever, ended %s) is now %+v", id, e.status, s)
			}
			if end {
				md.stats.sagasKept++
			}
		}
	}
}

const ms = int64(1e6)

func (h *harness) product(id string) *Product { return h.Machines[h.Part(ProductKey(id))].products[id] }
func (h *harness) order(id string) (*Order, *Saga) {
	m := h.Machines[h.Part(OrderKey(id))]
	return m.orders[id], m.sagas[id]
}
func (h *harness) payment(orderID string) *Payment {
	return h.Machines[h.Part(PaymentKey(orderID))].payments[orderID]
}

// checkAlways holds after every step, whatever is in flight.
func checkAlways(h *harness, md *model) {
	h.T.Helper()
	for _, id := range md.products {
		p := h.product(id)
		if p.Available() < 0 || p.Reserved < 0 {
			h.T.Fatalf("product %s: onHand %d reserved %d: oversold", id, p.OnHand, p.Reserved)
		}
		if s := p.ReservationsSum(); s != p.Reserved {
			h.T.Fatalf("product %s: reserved %d but its reservations add up to %d", id, p.Reserved, s)
		}
		for o, q := range md.direct[id] {
			if r := p.resv[o]; r.saga || r.qty != q {
				h.T.Fatalf("product %s: direct reservation %s is %+v, the model says %d", id, o, r, q)
			}
		}
	}
	for _, id := range md.sagaOrders {
		o, s := h.order(id)
		e, ended := md.ended[id]
		switch {
		case s == nil && (!ended || o.Status == OrderPending):
			h.T.Fatalf("order %s is %s but its saga is gone", id, o.Status)
		case s != nil && (o.Status == OrderPending) == s.Terminal():
			h.T.Fatalf("order %s is %s but its saga is %s", id, o.Status, s.Status)
		case s != nil && ended != s.Terminal(), s != nil && ended && e.status != s.Status:
			h.T.Fatalf("saga %s is %s; the model saw it end %+v", id, s.Status, e)
		}
		if o.Status == OrderConfirmed {
			pay := h.payment(id)
			if pay == nil || !pay.Saga || pay.Status != PaymentCaptured || pay.AmountCents != o.Total {
				h.T.Fatalf("order %s CONFIRMED (total %d) with payment %+v", id, o.Total, pay)
			}
		}
	}
}

// checkEnd holds once everything has been delivered and fired.
func checkEnd(h *harness, md *model) {
	h.T.Helper()
	var confirmedTotal, captured int64
	held := map[string]map[string]int64{} // product → confirmed order → units it keeps reserved
	for _, id := range md.sagaOrders {
		o, _ := h.order(id)
		e, ok := md.ended[id]
		if !ok {
			h.T.Fatalf("saga %s never ended", id)
		}
		s := &Saga{Status: e.status} // it may have been purged
		switch o.Status {
		case OrderConfirmed:
			md.stats.confirmed++
			if md.taken[id] {
				md.stats.paidDirectly++
			}
			confirmedTotal += o.Total
			if why := md.doomed[id]; why != "" {
				h.T.Fatalf("order %s CONFIRMED though %s", id, why)
			}
			if s.Status != SagaCompleted {
				h.T.Fatalf("order %s CONFIRMED with saga %s", id, s.Status)
			}
			for _, it := range md.orders[id].Items {
				if held[it.ProductID] == nil {
					held[it.ProductID] = map[string]int64{}
				}
				held[it.ProductID][id] += it.Quantity
			}
		case OrderCancelled:
			md.stats.cancelled++
			switch {
			case s.Status == SagaTimedOut:
				md.stats.timedOut++
			case s.Status == SagaCompensated:
				md.stats.compensated++
				if strings.HasPrefix(o.Reason, "customer ") {
					md.stats.unknownCustomer++
				}
			case s.Status == SagaCompleted && md.afterConfirm[id]:
				md.stats.cancelledConfirmed++
			default:
				h.T.Fatalf("order %s CANCELLED with saga %s", id, s.Status)
			}
			closes := md.orders[id].ClosePayment && !md.late[id]
			if pay := h.payment(id); pay != nil && (pay.Saga || md.asked[id] || closes) && pay.Status == PaymentCaptured {
				// A direct payment the saga could not take is refunded as
				// the order is cancelled, and so is one made before the
				// saga asked for its payment if the order was created with
				// ClosePayment (an older order's is the client's to refund
				// by hand), unless it was made after the order was closed
				// and its marker purged.
				var evs []Event
				if l := h.Machines[h.Part(PaymentKey(id))].events[PaymentKey(id)]; l != nil {
					evs = l.newest(50)
				}
				var oevs []Event
				if l := h.Machines[h.Part(OrderKey(id))].events[OrderKey(id)]; l != nil {
					oevs = l.newest(50)
				}
				h.T.Fatalf("order %s CANCELLED but its payment (saga %v, created %d, saga ended %d %s) is still captured\npayment events %+v\norder events %+v", id, pay.Saga, pay.CreatedAt, e.at, s.Status, evs, oevs)
			}
		}
		if p := h.payment(id); p != nil && p.Saga && p.Status == PaymentCaptured {
			captured += p.AmountCents
		}
	}
	// Captured minus refunded over saga payments: a refunded one is no
	// longer CAPTURED, so what remains captured is the difference.
	if captured != confirmedTotal {
		h.T.Fatalf("saga payments captured − refunded = %d, confirmed orders total %d", captured, confirmedTotal)
	}
	// The peer's stock model: only a replenish changes quantityOnHand,
	// and a CONFIRMED order's units stay reserved, exactly those.
	for _, id := range md.products {
		p := h.product(id)
		if want := md.initial[id] + md.replenish[id]; p.OnHand != want {
			h.T.Fatalf("product %s: onHand %d, want %d (initial %d + replenished %d)", id, p.OnHand, want, md.initial[id], md.replenish[id])
		}
		for o, r := range p.resv {
			if r.saga && r.qty != held[id][o] {
				h.T.Fatalf("product %s: saga reservation of %d for order %s, which holds %d as CONFIRMED", id, r.qty, o, held[id][o])
			}
		}
		for o, q := range held[id] {
			if r := p.resv[o]; !r.saga || r.qty != q {
				h.T.Fatalf("product %s: CONFIRMED order %s bought %d but its reservation is %+v", id, o, q, r)
			}
		}
	}
	checkAlways(h, md)
	checkPurges(h, md, true)
	h.CheckReplay()
}

var methods = []string{"CREDIT_CARD", "DEBIT_CARD", "BANK_TRANSFER", "DIGITAL_WALLET"}

const unknownMethod = "its payment method is unknown"

func runSeed(t testing.TB, seed uint64, st *stats) {
	h := newHarness(t, seed, 4)
	r := h.Rng
	md := &model{initial: map[string]int64{}, replenish: map[string]int64{}, direct: map[string]map[string]int64{},
		orders: map[string]*CreateOrder{}, doomed: map[string]string{}, stats: st, afterConfirm: map[string]bool{}}
	md.watch(h)
	// Customers c0 and c1 exist from the start, c3 from a random step
	// (racing the sagas that verify it), c2 never.
	for _, id := range []string{"c0", "c1"} {
		if res := h.Client(CustomerKey(id), &CreateCustomer{ID: id, Email: id + "@example.com", Name: "customer " + id}); res.Outcome != Created {
			t.Fatalf("create customer: %+v", res)
		}
	}
	c3At := r.IntN(120)
	forks, atFork := make([]func([]byte) []byte, h.N), make([][]byte, h.N)
	// retention: a quarter of the orders keep their saga for ever, the
	// others for up to 60 ms, so the clock passes many purge times.
	retention := func() int64 {
		if r.IntN(4) == 0 {
			return 0
		}
		return 1 + r.Int64N(60*ms)
	}
	prices := map[string]int64{}
	for i := range 5 {
		id := fmt.Sprintf("p%d", i)
		price := 1 + r.Int64N(50_000) // up to 500.00, so big orders pass 10000.00
		onHand := r.Int64N(25)
		// As the API does: the sku's claim creates the product by a message,
		// so replay and snapshots cover the index too.
		res := h.Client(SKUKey("SKU-"+id), &ClaimSKU{ID: id, SKU: "SKU-" + id, Name: "product " + id, PriceCents: price, OnHand: onHand})
		if res.Outcome != Created {
			t.Fatalf("claim sku: %+v", res)
		}
		h.Drain()
		if res := h.Client(SKUKey("SKU-"+id), &ClaimSKU{ID: id + "-dup", SKU: "SKU-" + id, Name: "dup", PriceCents: 1}); res.Outcome != Conflict {
			t.Fatalf("second claim of SKU-%s: %+v", id, res)
		}
		if h.Machines[h.Part(ProductKey(id))].products[id] == nil {
			t.Fatalf("product %s not created by its claim", id)
		}
		md.products = append(md.products, id)
		md.initial[id], prices[id] = onHand, price
		md.direct[id] = map[string]int64{}
	}
	pick := func() string { return md.products[r.IntN(len(md.products))] }
	nOrders, nDirect := 0, 0
	for step := range 120 {
		roll := r.IntN(100)
		switch {
		case roll < 28:
			id := fmt.Sprintf("o%d", nOrders)
			nOrders++
			c := &CreateOrder{OrderID: id, CustomerID: fmt.Sprintf("c%d", r.IntN(3)), PaymentMethod: methods[r.IntN(4)],
				DeadlineNs: (1 + r.Int64N(150)) * ms, RetentionNs: retention(), ClosePayment: r.IntN(4) != 0}
			if r.IntN(3) == 0 {
				// As the API sends an order whose customer it did not find.
				c.VerifyCustomer, c.CustomerID = true, fmt.Sprintf("c%d", r.IntN(4))
				if c.CustomerID == "c2" {
					md.doomed[id] = "its customer does not exist"
				}
			}
			if r.IntN(10) == 0 {
				c.PaymentMethod = "BITCOIN"
				md.doomed[id] = unknownMethod
			}
			for range 1 + r.IntN(4) {
				pid := pick()
				if r.IntN(25) == 0 {
					pid = "missing"
					md.doomed[id] = "it holds an unknown product"
				}
				c.Items = append(c.Items, LineItem{ProductID: pid, Quantity: 1 + r.Int64N(4), UnitPriceCents: prices[pid]})
			}
			res := h.Client(OrderKey(id), c)
			if res.Outcome != Created || res.Order.Status != OrderPending || res.Saga.Status != SagaInProgress {
				t.Fatalf("create order: %+v", res)
			}
			if res.Order.Total > MaxPaymentCents {
				md.doomed[id] = "its total is over 10000.00"
			}
			md.orders[id], md.sagaOrders = c, append(md.sagaOrders, id)
		case roll < 38:
			pid := pick()
			oid := fmt.Sprintf("perftest-%d", nDirect)
			if nOrders > 0 && r.IntN(8) == 0 {
				oid = fmt.Sprintf("o%d", r.IntN(nOrders)) // collides with a saga's reservation
			}
			nDirect++
			q := 1 + r.Int64N(3)
			before := h.product(pid).Available()
			res := h.Client(ProductKey(pid), &ReserveStock{ProductID: pid, OrderID: oid, Quantity: q})
			_, held := md.direct[pid][oid]
			switch {
			case res.Outcome == OK:
				md.direct[pid][oid] = q
			case res.Outcome == Same && held && md.direct[pid][oid] == q:
				// a retry of a reservation that exists
			case res.Outcome != Conflict:
				t.Fatalf("reserve: %+v", res)
			case before >= q && !held && h.product(pid).resv[oid].qty == 0:
				t.Fatalf("reserve of %d refused with %d available: %s", q, before, res.Msg)
			}
		case roll < 45:
			pid := pick()
			for oid, q := range md.direct[pid] { // any one; order does not matter to the model
				rel := 1 + r.Int64N(q)
				res := h.Client(ProductKey(pid), &ReleaseStock{ProductID: pid, OrderID: oid, Quantity: rel, Reason: "test"})
				if res.Outcome != OK {
					t.Fatalf("release: %+v", res)
				}
				if md.direct[pid][oid] -= rel; md.direct[pid][oid] == 0 {
					delete(md.direct[pid], oid)
				}
				break
			}
		case roll < 50:
			pid := pick()
			q := 1 + r.Int64N(5)
			if res := h.Client(ProductKey(pid), &ReplenishStock{ProductID: pid, Quantity: q, Reason: "restock"}); res.Outcome != OK {
				t.Fatalf("replenish: %+v", res)
			}
			md.replenish[pid] += q
		case roll < 55 && nOrders > 0:
			id := fmt.Sprintf("o%d", r.IntN(nOrders))
			if r.IntN(2) == 0 {
				// Most orders end cancelled: aim at a confirmed one, whose
				// confirmation messages may still be on their way.
				for i := range nOrders {
					if o, _ := h.order(fmt.Sprintf("o%d", i)); o.Status == OrderConfirmed {
						id = o.ID
						break
					}
				}
			}
			before, _ := h.order(id)
			was := before.Status
			res := h.Client(OrderKey(id), &CancelOrder{OrderID: id, Reason: "changed my mind", CancelledBy: "customer"})
			want := map[string]Outcome{OrderPending: OK, OrderCancelled: Same, OrderConfirmed: OK}[was]
			if res.Outcome != want || res.Order.Status != OrderCancelled {
				t.Fatalf("cancel of a %s order: %+v, want outcome %d", was, res, want)
			}
			if was == OrderConfirmed {
				md.afterConfirm[id] = true
			}
		case roll < 58 && nOrders > 0:
			id := fmt.Sprintf("o%d", r.IntN(nOrders))
			o, _ := h.order(id)
			want := map[string]Outcome{OrderPending: Unprocessable, OrderCancelled: Conflict, OrderConfirmed: Same}[o.Status]
			if res := h.Client(OrderKey(id), &ConfirmOrder{OrderID: id}); res.Outcome != want {
				t.Fatalf("confirm of a %s order: outcome %d, want %d", o.Status, res.Outcome, want)
			}
		case roll < 62:
			oid := fmt.Sprintf("direct-%d", len(md.payments))
			closed := false
			pay := &CreatePayment{CustomerID: "c0", AmountCents: 1 + r.Int64N(1_200_000), Currency: "EUR", Method: methods[r.IntN(4)]}
			if len(md.ghosts) > 0 && r.IntN(4) == 0 {
				// A cancelled order's marker refuses a direct payment
				// until it is purged.
				oid = md.ghosts[r.IntN(len(md.ghosts))]
				closed = h.Machines[h.Part(PaymentKey(oid))].closedOrders[oid]
			} else if nOrders > 0 && r.IntN(6) == 0 {
				oid = fmt.Sprintf("o%d", r.IntN(nOrders)) // takes the order's one payment
				if r.IntN(2) == 0 {
					oid = fmt.Sprintf("o%d", nOrders-1) // the order just placed, as its client pays for it
				}
				o, s := h.order(oid)
				if r.IntN(2) == 0 && o.Total >= 1 {
					// Paid as the saga would (a client of the peer's
					// payment service): the saga takes it, unless declined.
					pay.CustomerID, pay.AmountCents, pay.Currency = o.CustomerID, o.Total, sagaCurrency
				}
				switch {
				case o.Status != OrderPending || h.payment(oid) != nil || s.paymentAsked:
					// Too late to matter, or its request is already on the way.
				case pay.Currency == sagaCurrency && pay.AmountCents <= MaxPaymentCents:
					md.taken[oid] = true
					if md.doomed[oid] == unknownMethod {
						delete(md.doomed, oid) // the saga takes the payment; it pays by no method of its own
					}
				case md.doomed[oid] == "":
					md.doomed[oid] = "a direct payment it cannot take took its one payment"
				}
			}
			pay.OrderID = oid
			res := h.Client(PaymentKey(oid), pay)
			if closed && res.Outcome != Conflict {
				t.Fatalf("direct payment for closed order %s: %+v", oid, res)
			}
			if res.Outcome == Created {
				md.late[oid] = md.closed[oid]
				md.payments = append(md.payments, oid)
				if (res.Payment.Status == PaymentFailedSt) != (res.Payment.AmountCents > MaxPaymentCents) {
					t.Fatalf("payment of %d ended %s", res.Payment.AmountCents, res.Payment.Status)
				}
			} else if res.Outcome != Conflict {
				t.Fatalf("create payment: %+v", res)
			}
		case roll < 65 && len(md.payments) > 0:
			oid := md.payments[r.IntN(len(md.payments))]
			p := h.payment(oid)
			was := p.Status
			res := h.Client(PaymentKey(oid), &RefundPayment{PaymentID: p.ID, Reason: "returned"})
			if wantOK := was == PaymentCaptured && !p.Saga; (res.Outcome == OK) != wantOK {
				t.Fatalf("refund of a %s payment (saga %v): %+v", was, p.Saga, res)
			}
		case roll < 67:
			// A RefundForOrder for an order without payment leaves a
			// closed-order marker, purged after the retention it carries.
			// The saga never sends one (its payment request always comes
			// first), so the test sends it as that partition's message.
			id := fmt.Sprintf("ghost-%d", len(md.ghosts))
			md.ghosts = append(md.ghosts, id)
			data, err := (&RefundForOrder{OrderID: id, Reason: "cancelled", RetentionNs: retention()}).AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			if res := h.Apply(h.Part(PaymentKey(id)), engine.FromMessage, "", data); res.Outcome != OK {
				t.Fatalf("refund for order %s: %+v", id, res)
			}
		case roll < 88:
			h.Deliver()
		default:
			h.Advance(r.Int64N(10 * ms))
		}
		if step == c3At {
			if res := h.Client(CustomerKey("c3"), &CreateCustomer{ID: "c3", Email: "c3@example.com", Name: "customer c3"}); res.Outcome != Created {
				t.Fatalf("create customer: %+v", res)
			}
		}
		checkAlways(h, md)
		checkPurges(h, md, false)
		if step == 60 {
			h.CheckReplay() // also mid-flight, with messages and timers pending
		}
		if step == 40 {
			for p, m := range h.Machines {
				forks[p], atFork[p] = m.ForkSnapshot(), m.AppendSnapshot(nil)
			}
		}
	}
	h.Drain()
	// Then cancel some of the confirmed orders, between deliveries of each
	// other's releases and refunds.
	for _, id := range md.sagaOrders {
		if o, _ := h.order(id); o.Status == OrderConfirmed && r.IntN(3) == 0 {
			if res := h.Client(OrderKey(id), &CancelOrder{OrderID: id, Reason: "returned", CancelledBy: "shop"}); res.Outcome != OK {
				t.Fatalf("cancel of a CONFIRMED order: %+v", res)
			}
			md.afterConfirm[id] = true
			for r.IntN(3) != 0 && h.Deliver() {
			}
			checkAlways(h, md)
		}
	}
	h.Drain()
	// A fork encodes the state at the fork, however much changed since.
	for p, f := range forks {
		if !bytes.Equal(f(nil), atFork[p]) {
			t.Fatalf("partition %d: the forked snapshot is not the state at the fork", p)
		}
	}
	checkEnd(h, md)
	st.steps += 120
}

// TestPropertySagas runs random mixes of orders, direct stock calls,
// payments, manual confirms and cancels, and deadline expiries in random
// interleavings over four partitions, and checks the invariants.
func TestPropertySagas(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	st := &stats{}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runSeed(t, seed, st) })
		if t.Failed() {
			return
		}
	}
	t.Logf("%+v", *st)
	// The mix must reach every ending, or the checks above prove little.
	if st.confirmed == 0 || st.timedOut == 0 || st.compensated == 0 || st.sagasPurged == 0 || st.sagasKept == 0 || st.markersPurged == 0 || st.heldBack == 0 ||
		st.cancelledConfirmed == 0 || st.unknownCustomer == 0 || st.paidDirectly == 0 || st.refundedOnClose == 0 {
		t.Fatalf("the random mix missed an ending: %+v", *st)
	}
}

// TestSKUClaim: the sku's partition refuses a second product with the
// sku (no message sent), keeps its claims across a snapshot, and still
// reads a version 2 snapshot, which has no index.
func TestSKUClaim(t *testing.T) {
	m := NewMachine()
	claim := func(id, sku string) (*engine.Effects, *Result) {
		fx := new(engine.Effects)
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1, Cmd: &ClaimSKU{ID: id, SKU: sku, Name: "n", PriceCents: 1}}, fx)
		return fx, fx.Replied().(*Result)
	}
	if fx, res := claim("p1", "A"); res.Outcome != Created || len(fx.Sends()) != 1 || fx.Sends()[0].Key != ProductKey("p1") {
		t.Fatalf("first claim: %+v, sends %v", res, fx.Sends())
	}
	if fx, res := claim("p2", "A"); res.Outcome != Conflict || !strings.Contains(res.Msg, `"p1"`) || len(fx.Sends()) != 0 || !fx.IsUnchanged() {
		t.Fatalf("second claim: %+v, sends %v", res, fx.Sends())
	}
	r := NewMachine()
	if err := r.Restore(m.AppendSnapshot(nil)); err != nil || r.skus["A"] != "p1" {
		t.Fatalf("restored index %v, %v", r.skus, err)
	}
	old := NewMachine()
	v2 := wire.Writer{}
	v2.U32(2)
	_ = old.code(&wire.Coder{W: &v2})
	// The empty index's count and the empty dead-letter state (version 4),
	// which version 2 lacks.
	v2.B = v2.B[:len(v2.B)-1-emptyDLQBytes]
	if err := NewMachine().Restore(v2.B); err != nil {
		t.Fatalf("version 2 snapshot: %v", err)
	}
}

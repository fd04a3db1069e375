package commerce

import (
	"fmt"
	"strings"

	"github.com/surge-run/surge/internal/engine"
)

func decline(amount int64, method string) string {
	if amount > MaxPaymentCents {
		return "amount exceeds " + FormatMoney(MaxPaymentCents)
	}
	for _, pm := range PaymentMethods {
		if method == pm {
			return ""
		}
	}
	return fmt.Sprintf("payment method %q is not supported", method)
}

// pay records the one payment of an order: captured at once, or FAILED
// with the processor's reason.
func (m *Machine) pay(orderID, customerID string, amount int64, currency, method string, saga bool, now int64) *Payment {
	p := &Payment{ID: PaymentIDFor(orderID), OrderID: orderID, CustomerID: customerID, AmountCents: amount,
		Currency: currency, Method: method, Saga: saga, CreatedAt: now, UpdatedAt: now}
	key := PaymentKey(orderID)
	m.event(key, "PaymentRequested", now, "amount", FormatMoney(amount), "method", method)
	if why := decline(amount, method); why != "" {
		p.Status, p.FailureReason = PaymentFailedSt, why
		m.event(key, "PaymentFailed", now, "reason", why)
	} else {
		p.Status, p.TransactionID = PaymentCaptured, "TX-"+orderID
		m.event(key, "PaymentAuthorized", now, "transactionId", p.TransactionID)
		m.event(key, "PaymentCaptured", now, "amount", FormatMoney(amount))
	}
	m.payments[orderID] = p
	return p
}

func (m *Machine) createPayment(c *CreatePayment, now int64) *Result {
	for _, t := range [][2]string{{"orderId", c.OrderID}, {"customerId", c.CustomerID}} {
		if msg := validText(t[0], t[1], 1, MaxTextLen); msg != "" {
			return invalid("%s", msg)
		}
	}
	if msg := validText("method", c.Method, 0, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if c.AmountCents < 1 || c.AmountCents > MaxMoneyCents {
		return invalid("amount must be between 0.01 and %s", FormatMoney(MaxMoneyCents))
	}
	if len(c.Currency) != 3 || strings.ToUpper(c.Currency) != c.Currency || strings.ContainsFunc(c.Currency, func(r rune) bool { return r < 'A' || r > 'Z' }) {
		return invalid("currency must be three capital letters, like EUR")
	}
	if old := m.payments[c.OrderID]; old != nil {
		cp := *old
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("order %q already has payment %s", c.OrderID, old.ID), Payment: &cp}
	}
	if m.closedOrders[c.OrderID] {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("order %q was cancelled", c.OrderID)}
	}
	p := m.pay(c.OrderID, c.CustomerID, c.AmountCents, c.Currency, c.Method, false, now)
	cp := *p
	return &Result{Outcome: Created, Payment: &cp}
}

func (m *Machine) refund(p *Payment, reason string, now int64) {
	p.Status, p.UpdatedAt = PaymentRefunded, now
	m.event(PaymentKey(p.OrderID), "PaymentRefunded", now, "amount", FormatMoney(p.AmountCents), "reason", reason)
}

func (m *Machine) refundPayment(c *RefundPayment, now int64) *Result {
	orderID, ok := OrderOfPaymentID(c.PaymentID)
	p := m.payments[orderID]
	if !ok || p == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("payment %q not found", c.PaymentID)}
	}
	if msg := validText("reason", c.Reason, 1, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	cp := *p
	if p.Saga {
		return &Result{Outcome: Conflict, Msg: "this payment belongs to an order's saga; cancel the order to refund it", Payment: &cp}
	}
	if p.Status != PaymentCaptured {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("a %s payment cannot be refunded", p.Status), Payment: &cp}
	}
	m.refund(p, c.Reason, now)
	cp = *p
	return &Result{Outcome: OK, Payment: &cp}
}

func (m *Machine) processPayment(c *ProcessPaymentForOrder, now int64, fx *engine.Effects) *Result {
	answer := func(paymentID, failure string) *Result {
		var msg engine.Command = &PaymentProcessed{OrderID: c.OrderID, PaymentID: paymentID}
		if failure != "" {
			msg = &PaymentFailed{OrderID: c.OrderID, Reason: failure}
		}
		if err := fx.Send(OrderKey(c.OrderID), WorkloadID, msg); err != nil {
			return invalid("%v", err)
		}
		return &Result{Outcome: OK}
	}
	if m.closedOrders[c.OrderID] {
		return answer("", "order was cancelled")
	}
	if old := m.payments[c.OrderID]; old != nil {
		// Exactly one payment per order. A client of the peer's payment
		// service pays for the order it just placed (POST /api/payments):
		// when that payment charged what the saga would (captured, the
		// order's customer, amount and currency), it is the order's
		// payment, and the saga takes it rather than cancel a paid order.
		if c.Take && !old.Saga && old.Status == PaymentCaptured && old.CustomerID == c.CustomerID &&
			old.AmountCents == c.AmountCents && old.Currency == sagaCurrency {
			old.Saga, old.UpdatedAt = true, now
			m.event(PaymentKey(c.OrderID), "PaymentTakenForOrder", now, "transactionId", old.TransactionID)
			return answer(old.ID, "")
		}
		// Any other is not the saga's to take, and this answer cancels
		// the order (or it is cancelled already): what was captured for
		// it goes back now. No message: a log written before this was
		// done replays with the same messages, only this refund added.
		if !old.Saga && old.Status == PaymentCaptured {
			m.refund(old, "order cancelled: its saga could not take this payment", now)
		}
		return answer("", fmt.Sprintf("order already has payment %s", old.ID))
	}
	p := m.pay(c.OrderID, c.CustomerID, c.AmountCents, sagaCurrency, c.Method, true, now)
	if p.Status == PaymentFailedSt {
		return answer("", p.FailureReason)
	}
	return answer(p.ID, "")
}

func (m *Machine) refundForOrder(c *RefundForOrder, now int64, fx *engine.Effects) *Result {
	p := m.payments[c.OrderID]
	if p == nil {
		if m.closedOrders[c.OrderID] {
			return &Result{Outcome: Ignored}
		}
		// No event: every order cancelled before it was paid comes here,
		// and an event history kept for ever per such order would cost
		// about a quarter more than the order itself once the marker is
		// purged (TestBytesPerCancelledOrder).
		m.closedOrders[c.OrderID] = true
		m.retire(c.OrderID, true, now, c.RetentionNs, fx)
		return &Result{Outcome: OK}
	}
	// The order is cancelled: what was captured for it goes back, the
	// saga's payment or one the client made directly (which only a saga
	// that never asked for its payment can find here: one that asked had
	// it taken or refunded by processPayment, which came first).
	if p.Status != PaymentCaptured {
		return &Result{Outcome: Ignored}
	}
	m.refund(p, c.Reason, now)
	return &Result{Outcome: OK}
}

// sagaCurrency is what a saga charges in: the peer's orders carry none.
const sagaCurrency = "USD"

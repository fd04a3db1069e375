package commerce

import (
	"fmt"
	"sort"

	"github.com/surge-run/surge/internal/engine"
)

func deadlineTimer(orderID string) string { return "saga/" + orderID }

func (o *Order) copy() *Order {
	cp := *o
	cp.Items = append([]LineItem(nil), o.Items...)
	return &cp
}

func (s *Saga) copy() *Saga {
	cp := *s
	cp.Steps = append([]SagaStep(nil), s.Steps...)
	cp.Products = append([]string(nil), s.Products...)
	return &cp
}

func (m *Machine) createOrder(c *CreateOrder, now int64, fx *engine.Effects) *Result {
	if r := m.checkCreateOrder(c); r != nil {
		return r
	}
	perProduct, subtotal, r := orderLines(c.Items)
	if r != nil {
		return r
	}
	products := make([]string, 0, len(perProduct))
	for p := range perProduct {
		products = append(products, p)
	}
	sort.Strings(products) // messages go out in a deterministic order
	o := &Order{ID: c.OrderID, CustomerID: c.CustomerID, Items: append([]LineItem(nil), c.Items...),
		Subtotal: subtotal, Tax: Tax(subtotal), Status: OrderPending, ShippingAddress: c.ShippingAddress,
		CustomerName: c.CustomerName, CustomerEmail: c.CustomerEmail, PaymentMethod: c.PaymentMethod,
		CreatedAt: now, UpdatedAt: now, Deadline: now + c.DeadlineNs}
	o.Total = o.Subtotal + o.Tax
	waiting, r := openSaga(c, o, products, perProduct, fx)
	if r != nil {
		return r
	}
	s := &Saga{ID: c.OrderID, Type: SagaType, Status: SagaStarted, StartedAt: now, UpdatedAt: now, Products: products, waiting: waiting, RetentionNs: c.RetentionNs,
		closePayment: c.ClosePayment}
	m.orders[c.OrderID] = o
	m.sagas[c.OrderID] = s
	key := OrderKey(c.OrderID)
	m.event(key, "OrderCreated", now, "customerId", c.CustomerID, "total", FormatMoney(o.Total), "status", OrderPending)
	m.sagaStep(s, "ORDER_CREATED", "COMPLETED", now)
	m.sagaStatus(s, SagaInProgress, now)
	if c.VerifyCustomer {
		m.sagaStep(s, "CUSTOMER_VERIFICATION", "STARTED", now)
	}
	m.sagaStep(s, "STOCK_RESERVATION", "STARTED", now)
	return &Result{Outcome: Created, Order: o.copy(), Saga: s.copy()}
}

// checkCreateOrder refuses an order whose id is taken or whose fields,
// other than its line items, are out of bounds (nil: it may go on).
func (m *Machine) checkCreateOrder(c *CreateOrder) *Result {
	if msg := validText("orderId", c.OrderID, 1, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if msg := validText("customerId", c.CustomerID, 1, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if m.orders[c.OrderID] != nil {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("order %q already exists", c.OrderID)}
	}
	if len(c.Items) == 0 || len(c.Items) > MaxLineItems {
		return invalid("lineItems must hold 1 to %d items", MaxLineItems)
	}
	for _, t := range [][2]string{{"shippingAddress", c.ShippingAddress}, {"customerName", c.CustomerName}, {"customerEmail", c.CustomerEmail}, {"method", c.PaymentMethod}} {
		if msg := validText(t[0], t[1], 0, MaxTextLen); msg != "" {
			return invalid("%s", msg)
		}
	}
	if c.DeadlineNs < 1 {
		return invalid("the saga deadline must be positive")
	}
	if c.RetentionNs < 0 {
		return invalid("the saga retention must not be negative")
	}
	return nil
}

// orderLines checks an order's line items and sums them: the quantity
// to reserve of each product and the subtotal (a Result: refused).
func orderLines(items []LineItem) (map[string]int64, int64, *Result) {
	perProduct := map[string]int64{}
	var subtotal int64
	for i, it := range items {
		if msg := validText("productId", it.ProductID, 1, MaxTextLen); msg != "" {
			return nil, 0, invalid("lineItems[%d]: %s", i, msg)
		}
		if msg := validQty(it.Quantity); msg != "" {
			return nil, 0, invalid("lineItems[%d]: %s", i, msg)
		}
		if it.UnitPriceCents < 0 || it.UnitPriceCents > MaxMoneyCents {
			return nil, 0, invalid("lineItems[%d]: unitPrice must be between 0.00 and %s", i, FormatMoney(MaxMoneyCents))
		}
		for _, t := range [][2]string{{"productName", it.ProductName}, {"sku", it.SKU}} {
			if msg := validText(t[0], t[1], 0, MaxTextLen); msg != "" {
				return nil, 0, invalid("lineItems[%d]: %s", i, msg)
			}
		}
		if perProduct[it.ProductID]+it.Quantity > MaxQuantity {
			return nil, 0, invalid("at most %d of product %q per order", MaxQuantity, it.ProductID)
		}
		perProduct[it.ProductID] += it.Quantity
		subtotal += it.Quantity * it.UnitPriceCents // ≤ 100 × 1e6 × 1e10: no overflow
	}
	return perProduct, subtotal, nil
}

// openSaga sends the saga's first messages (a reservation per product in
// products' order, then the customer's check if asked) and sets its
// deadline. It returns how many answers the payment waits for. It runs
// before the machine changes anything, so a refusal (an effect that does
// not encode) leaves no half-made order behind.
func openSaga(c *CreateOrder, o *Order, products []string, perProduct map[string]int64, fx *engine.Effects) (int, *Result) {
	for _, p := range products {
		if err := fx.Send(ProductKey(p), WorkloadID, &ReserveForOrder{OrderID: c.OrderID, ProductID: p, Quantity: perProduct[p]}); err != nil {
			return 0, invalid("%v", err)
		}
	}
	waiting := len(products)
	if c.VerifyCustomer {
		if err := fx.Send(CustomerKey(c.CustomerID), WorkloadID, &VerifyCustomerForOrder{OrderID: c.OrderID, CustomerID: c.CustomerID}); err != nil {
			return 0, invalid("%v", err)
		}
		waiting++ // the payment waits for the customer's answer too
	}
	if err := fx.SetTimer(deadlineTimer(c.OrderID), o.Deadline, &SagaDeadline{OrderID: c.OrderID}); err != nil {
		return 0, invalid("%v", err)
	}
	return waiting, nil
}

func (m *Machine) sagaStep(s *Saga, name, status string, now int64) {
	s.Steps = append(s.Steps, newSagaStep(name, status, now))
	s.UpdatedAt = now
	m.event(OrderKey(s.ID), "SagaStep", now, "step", name, "status", status)
}

func (m *Machine) sagaStatus(s *Saga, status string, now int64) {
	m.event(OrderKey(s.ID), "SagaStatusChanged", now, "from", s.Status, "to", status)
	s.Status, s.UpdatedAt = status, now
}

func (m *Machine) setOrderStatus(o *Order, status, reason string, now int64) {
	m.event(OrderKey(o.ID), "OrderStatusChanged", now, "from", o.Status, "to", status, "reason", reason)
	o.Status, o.Reason, o.UpdatedAt = status, reason, now
}

// compensate ends a saga that will not complete: the order is cancelled,
// every product is told to release (those that reserved nothing ignore
// it) and the payment's partition to refund: always, when the order was
// created with ClosePayment, since a client may have paid for it directly
// before the saga asked (and stock, a cancel or the deadline came first);
// for an older order only if the saga asked.
func (m *Machine) compensate(o *Order, s *Saga, final, reason string, now int64, fx *engine.Effects) *Result {
	for _, p := range s.Products {
		if err := fx.Send(ProductKey(p), WorkloadID, &ReleaseForOrder{OrderID: o.ID, ProductID: p, Reason: reason}); err != nil {
			return invalid("%v", err)
		}
	}
	if s.paymentAsked || s.closePayment {
		// The retention goes along so the payment partition can retire a
		// closed-order marker as this partition retires the saga.
		if err := fx.Send(PaymentKey(o.ID), WorkloadID, &RefundForOrder{OrderID: o.ID, Reason: reason, RetentionNs: s.RetentionNs}); err != nil {
			return invalid("%v", err)
		}
	}
	fx.CancelTimer(deadlineTimer(o.ID))
	m.dropParked(o.ID)
	if final != SagaTimedOut {
		m.sagaStatus(s, SagaCompensating, now)
	}
	m.sagaStep(s, "COMPENSATION", "COMPLETED", now)
	s.FailureReason = reason
	m.sagaStatus(s, final, now)
	m.setOrderStatus(o, OrderCancelled, reason, now)
	m.retire(o.ID, false, now, s.RetentionNs, fx)
	fx.Notify(orderEnded(o, s, now))
	return &Result{Outcome: OK, Order: o.copy(), Saga: s.copy()}
}

// running finds a saga that a message may still change.
func (m *Machine) running(orderID string) (*Order, *Saga) {
	o, s := m.orders[orderID], m.sagas[orderID]
	if o == nil || s == nil || s.Terminal() {
		return nil, nil
	}
	return o, s
}

func (m *Machine) stockAnswer(orderID, productID, failure string, now int64, fx *engine.Effects) *Result {
	o, s := m.running(orderID)
	if o == nil || s.paymentAsked || s.waiting == 0 {
		return &Result{Outcome: Ignored}
	}
	s.waiting--
	if failure != "" {
		m.sagaStep(s, "STOCK_RESERVATION", "FAILED", now)
		return m.compensate(o, s, SagaCompensated, "stock reservation failed: "+failure, now, fx)
	}
	m.event(OrderKey(orderID), "StockReservedForOrder", now, "productId", productID)
	return m.payWhenReady(o, s, now, fx)
}

// payWhenReady asks for the payment once every answer the saga waits for
// (each product's and, if asked, the customer's) has come.
func (m *Machine) payWhenReady(o *Order, s *Saga, now int64, fx *engine.Effects) *Result {
	if s.waiting > 0 {
		return &Result{Outcome: OK}
	}
	if err := fx.Send(PaymentKey(o.ID), WorkloadID, &ProcessPaymentForOrder{OrderID: o.ID, CustomerID: o.CustomerID, AmountCents: o.Total, Method: o.PaymentMethod, Take: true}); err != nil {
		return invalid("%v", err)
	}
	s.paymentAsked = true
	m.sagaStep(s, "STOCK_RESERVATION", "COMPLETED", now)
	m.sagaStep(s, "PAYMENT", "STARTED", now)
	return &Result{Outcome: OK}
}

// verifyCustomer answers whether the order's customer exists and may
// order. Sending the answer is a change, whatever it says.
func (m *Machine) verifyCustomer(c *VerifyCustomerForOrder, fx *engine.Effects) *Result {
	reason := ""
	switch cu := m.customers[c.CustomerID]; {
	case cu == nil:
		reason = fmt.Sprintf("customer %q not found", c.CustomerID)
	case cu.Status != CustomerActive:
		reason = fmt.Sprintf("customer %q is %s; only an ACTIVE customer can order", c.CustomerID, cu.Status)
	}
	if err := fx.Send(OrderKey(c.OrderID), WorkloadID, &CustomerVerified{OrderID: c.OrderID, CustomerID: c.CustomerID, Reason: reason}); err != nil {
		return invalid("%v", err)
	}
	return &Result{Outcome: OK, Msg: reason}
}

func (m *Machine) customerAnswer(c *CustomerVerified, now int64, fx *engine.Effects) *Result {
	o, s := m.running(c.OrderID)
	if o == nil || s.paymentAsked || s.waiting == 0 {
		return &Result{Outcome: Ignored}
	}
	s.waiting--
	if c.Reason != "" {
		m.sagaStep(s, "CUSTOMER_VERIFICATION", "FAILED", now)
		return m.compensate(o, s, SagaCompensated, c.Reason, now, fx)
	}
	m.sagaStep(s, "CUSTOMER_VERIFICATION", "COMPLETED", now)
	return m.payWhenReady(o, s, now, fx)
}

func (m *Machine) paymentAnswer(orderID, paymentID, failure string, now int64, fx *engine.Effects) *Result {
	o, s := m.running(orderID)
	if o == nil || !s.paymentAsked {
		return &Result{Outcome: Ignored}
	}
	if failure != "" {
		m.sagaStep(s, "PAYMENT", "FAILED", now)
		// Nothing to refund: the payment was declined, or the order's one
		// payment is one made directly for it, which the payment's
		// partition refunded as it answered (processPayment). For an
		// order logged before ClosePayment no refund request goes out:
		// one would shift the numbers of every later message when such a
		// log is replayed (a ClosePayment order's goes out all the same,
		// and finds nothing captured).
		s.paymentAsked = false
		return m.compensate(o, s, SagaCompensated, "payment failed: "+failure, now, fx)
	}
	for _, p := range s.Products {
		if err := fx.Send(ProductKey(p), WorkloadID, &CommitForOrder{OrderID: orderID, ProductID: p}); err != nil {
			return invalid("%v", err)
		}
	}
	fx.CancelTimer(deadlineTimer(orderID))
	o.PaymentID = paymentID
	m.sagaStep(s, "PAYMENT", "COMPLETED", now)
	m.sagaStep(s, "ORDER_CONFIRMATION", "COMPLETED", now)
	m.sagaStatus(s, SagaCompleted, now)
	m.setOrderStatus(o, OrderConfirmed, "", now)
	m.retire(o.ID, false, now, s.RetentionNs, fx)
	fx.Notify(orderEnded(o, s, now))
	return &Result{Outcome: OK, Order: o.copy(), Saga: s.copy()}
}

func (m *Machine) deadline(c *SagaDeadline, now int64, fx *engine.Effects) *Result {
	o, s := m.running(c.OrderID)
	if o == nil {
		return &Result{Outcome: Ignored}
	}
	return m.compensate(o, s, SagaTimedOut, "saga deadline passed", now, fx)
}

func (m *Machine) confirmOrder(c *ConfirmOrder) *Result {
	o := m.orders[c.OrderID]
	if o == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("order %q not found", c.OrderID)}
	}
	switch o.Status {
	case OrderConfirmed:
		return &Result{Outcome: Same, Order: o.copy()}
	case OrderCancelled:
		return &Result{Outcome: Conflict, Msg: "order is CANCELLED and cannot be confirmed", Order: o.copy()}
	}
	return &Result{Outcome: Unprocessable, Msg: "order is confirmed by its saga once the payment is processed; it is still running", Order: o.copy()}
}

func (m *Machine) cancelOrder(c *CancelOrder, now int64, fx *engine.Effects) *Result {
	o := m.orders[c.OrderID]
	if o == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("order %q not found", c.OrderID)}
	}
	if msg := validText("reason", c.Reason, 1, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if msg := validText("cancelledBy", c.CancelledBy, 1, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	switch o.Status {
	case OrderCancelled:
		return &Result{Outcome: Same, Order: o.copy()}
	case OrderConfirmed:
		return m.cancelConfirmed(o, c, now, fx)
	}
	o.CancelledBy = c.CancelledBy
	return m.compensate(o, m.sagas[o.ID], SagaCompensated, c.Reason, now, fx)
}

// cancelConfirmed cancels an order whose saga completed: each product
// gets its units back and the captured payment is refunded. It reads the
// order, not the saga, which may have been purged; the saga stays
// COMPLETED, since it did complete. The engine delivers the release after
// the saga's reservation and the refund after the capture (one FIFO per
// pair of partitions), so neither can overtake what it undoes.
func (m *Machine) cancelConfirmed(o *Order, c *CancelOrder, now int64, fx *engine.Effects) *Result {
	qty := map[string]int64{}
	for _, it := range o.Items {
		qty[it.ProductID] += it.Quantity
	}
	for _, p := range sortedKeys(qty) {
		if err := fx.Send(ProductKey(p), WorkloadID, &ReleaseConfirmedOrder{OrderID: o.ID, ProductID: p, Quantity: qty[p], Reason: c.Reason}); err != nil {
			return invalid("%v", err)
		}
	}
	// The payment exists (the order was confirmed by it), so the refund
	// leaves no closed-order marker and needs no retention.
	if err := fx.Send(PaymentKey(o.ID), WorkloadID, &RefundForOrder{OrderID: o.ID, Reason: c.Reason}); err != nil {
		return invalid("%v", err)
	}
	o.CancelledBy = c.CancelledBy
	m.setOrderStatus(o, OrderCancelled, c.Reason, now)
	return &Result{Outcome: OK, Order: o.copy()}
}

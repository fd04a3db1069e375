// Package commerce is the second workload: customers, products with stock,
// orders and payments, and the order-fulfilment saga that ties them
// together (the Hazelcast eCommerce framework's API, see
// docs/API.md). All of its rules are in this file, except
// the dead-letter queue and fault injection (dlq.go).
//
// Every entity lives under its own key, so it is in exactly one partition
// and different orders' sagas run on every partition at once:
//
//	customer  c/<customerId>
//	product   p/<productId>
//	order     o/<orderId>      (also its saga: the saga id is the order id)
//	payment   pay/<orderId>    (one payment per order, by construction)
//
// A payment's id is PaymentIDFor(orderId) = "PAY-" + orderId, so the API
// finds the partition of GET /api/payments/{id} from the id alone.
//
// The saga is choreographed over engine messages, with the order's
// partition as coordinator:
//
//  1. CreateOrder (client, at o/<id>): order PENDING, saga STARTED then
//     IN_PROGRESS; one ReserveForOrder per distinct product (its lines
//     summed) and a deadline timer whose time is in the logged command.
//     With VerifyCustomer (the API did not find the customer) also a
//     VerifyCustomerForOrder to c/<customerId>, answered CustomerVerified:
//     the payment waits for it too, and a failure compensates as a stock
//     failure does.
//  2. Each product reserves its quantity all-or-none in one Apply (check
//     and change together, so nothing can oversell) and answers
//     StockReserved or StockFailed.
//  3. The first StockFailed cancels the order at once and sends
//     ReleaseForOrder to every product of the order, also those that have
//     not answered yet: the engine delivers messages exactly once and in
//     order per (source partition, target partition), so a product always
//     applies the order's ReserveForOrder before its ReleaseForOrder, and
//     a product that reserved nothing ignores the release. Waiting for the
//     other answers would only make the compensation later.
//     Why the engine keeps that order: a partition numbers everything it
//     sends with one sequence, delivers a durable batch's messages in
//     order into the receiver's FIFO mailbox (log completions run in
//     append order), re-sends its outbox after a crash in sequence order
//     before anything new, and the receiver drops any sequence at or
//     below its high-water mark for that sender. So per (source, target)
//     pair a message is applied once, after every earlier one; one that
//     arrived out of order would be dropped, not applied late.
//  4. All reserved: ProcessPaymentForOrder to pay/<id>, which captures or
//     declines (amount over 10000.00, unknown method) and answers
//     PaymentProcessed or PaymentFailed.
//  5. Processed: order CONFIRMED, saga COMPLETED, timer cancelled; the
//     units stay reserved (the peer's stock model). CommitForOrder still
//     goes to every product and changes nothing (see commitForOrder).
//     Failed: release, order CANCELLED, saga COMPENSATED.
//  6. Deadline while not terminal: saga TIMED_OUT, order CANCELLED,
//     ReleaseForOrder to every product and, if the payment was requested,
//     RefundForOrder to the payment, which by the same FIFO argument
//     arrives after the request and refunds what it captured.
//
// Retention: an ended saga (COMPLETED, COMPENSATED, FAILED, TIMED_OUT)
// and its bookkeeping are purged once the retention logged in its
// CreateOrder has passed (see purgeTimerID); its order, payment and
// events stay, because users query them.
//
// Manual cancel of a PENDING order compensates like the deadline, with
// saga status COMPENSATED and the given reason; a CONFIRMED order is
// cancelled by ReleaseConfirmedOrder to its products and RefundForOrder
// to its payment (its saga stays COMPLETED); a CANCELLED one is already
// cancelled (no change).
// Manual confirm confirms nothing by itself: an order is confirmed by its
// payment, so confirm answers 422 while the saga runs, 409 once
// cancelled, and no change once confirmed. A saga payment is refunded
// only by its order's saga or cancel (refunding it by hand would leave a
// CONFIRMED order unpaid); payments created directly by POST
// /api/payments refund by hand. A direct payment for an order whose saga
// has not charged it yet is taken by the saga when it charged what the
// saga would, and becomes a saga payment; any other makes the saga fail,
// and the payment's partition refunds it as it answers (processPayment).
// One made before the saga ends some other way (a cancel, stock, the
// deadline) is refunded by the RefundForOrder that a saga created with
// ClosePayment sends as it compensates, asked for its payment or not.
// Late and duplicate answers to a terminal order change nothing.
//
// Only a command that changes state is logged: every rejection is
// declared Unchanged.
package commerce

import (
	"fmt"
	"strings"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/retain"
)

// WorkloadID is written into every log record of this workload.
const WorkloadID uint8 = 2

// Limits, checked at the edge and again here.
const (
	MaxQuantity     = 1_000_000
	MaxLineItems    = 100
	MaxTextLen      = 256
	DefaultDeadline = int64(60e9) // ns: the peer's saga timeout
	maxStockUnits   = int64(1) << 40
)

// Key prefixes; see the package comment.
func CustomerKey(id string) string { return "c/" + id }
func ProductKey(id string) string  { return "p/" + id }

// SKUKey is where a sku's claim lives (see ClaimSKU).
func SKUKey(sku string) string  { return "sku/" + sku }
func OrderKey(id string) string { return "o/" + id }
func PaymentKey(orderID string) string {
	return "pay/" + orderID
}

// PaymentIDFor names the one payment of an order.
func PaymentIDFor(orderID string) string { return "PAY-" + orderID }

// OrderOfPaymentID undoes PaymentIDFor.
func OrderOfPaymentID(paymentID string) (string, bool) {
	o, ok := strings.CutPrefix(paymentID, "PAY-")
	return o, ok && o != ""
}

// Statuses, exactly as the compat API spells them.
const (
	CustomerActive    = "ACTIVE"
	CustomerSuspended = "SUSPENDED"
	CustomerClosed    = "CLOSED"

	ProductActive     = "ACTIVE"
	ProductOutOfStock = "OUT_OF_STOCK"

	OrderPending   = "PENDING"
	OrderConfirmed = "CONFIRMED"
	OrderCancelled = "CANCELLED"

	SagaStarted      = "STARTED"
	SagaInProgress   = "IN_PROGRESS"
	SagaCompleted    = "COMPLETED"
	SagaCompensating = "COMPENSATING"
	SagaCompensated  = "COMPENSATED"
	SagaFailed       = "FAILED"
	SagaTimedOut     = "TIMED_OUT"
	SagaType         = "ORDER_FULFILLMENT"

	PaymentPending    = "PENDING"
	PaymentAuthorized = "AUTHORIZED"
	PaymentCaptured   = "CAPTURED"
	PaymentFailedSt   = "FAILED"
	PaymentRefunded   = "REFUNDED"
)

// PaymentMethods the simulated processor accepts.
var PaymentMethods = []string{"CREDIT_CARD", "DEBIT_CARD", "BANK_TRANSFER", "DIGITAL_WALLET"}

// MaxPaymentCents: the peer's processor declines anything above 10000.00.
const MaxPaymentCents = 10000_00

// Field is one named value of an event.
type Field struct{ K, V string }

// Event is one state change of an entity. Seq counts from 1 per entity.
type Event struct {
	Seq    uint64
	Type   string
	At     int64
	Fields []Field
}

// Customer of the shop.
type Customer struct {
	ID, Email, Name, Address, Phone, Status string
	CreatedAt, UpdatedAt                    int64
}

// Product with its stock. Available = OnHand - Reserved.
type Product struct {
	ID, SKU, Name, Description, Category string
	PriceCents                           int64
	OnHand, Reserved                     int64
	CreatedAt, UpdatedAt                 int64
	// resv holds the live reservations by order id; Reserved is their sum.
	resv map[string]reservation
}

type reservation struct {
	qty  int64
	saga bool // made by an order's saga (only the saga releases or commits it)
}

// Available is what can still be reserved.
func (p *Product) Available() int64 { return p.OnHand - p.Reserved }

// Status is derived from the stock, so it can never disagree with it.
func (p *Product) Status() string {
	if p.Available() <= 0 {
		return ProductOutOfStock
	}
	return ProductActive
}

// Reservation reports the live reservation of orderID (0 if none).
func (p *Product) Reservation(orderID string) int64 { return p.resv[orderID].qty }

// ReservationsSum adds up the live reservations; equal to Reserved.
func (p *Product) ReservationsSum() int64 {
	var s int64
	for _, r := range p.resv {
		s += r.qty
	}
	return s
}

// LineItem of an order.
type LineItem struct {
	ProductID, ProductName, SKU string
	Quantity                    int64
	UnitPriceCents              int64
}

// Order and its totals in cents.
type Order struct {
	ID, CustomerID                 string
	Items                          []LineItem
	Subtotal, Tax, Total           int64
	Status                         string
	ShippingAddress                string
	CustomerName, CustomerEmail    string
	PaymentMethod                  string
	PaymentID                      string
	Reason, CancelledBy            string
	CreatedAt, UpdatedAt, Deadline int64
}

// SagaStep is one step of a saga as the saga route shows it.
type SagaStep struct {
	// Codes into sagaStepNames and sagaStepStatuses: a saga's steps hold
	// no pointers, so the collector skips them (six per order, kept while
	// the saga is).
	name, status uint8
	At           int64
}

var (
	sagaStepNames    = [...]string{"ORDER_CREATED", "STOCK_RESERVATION", "PAYMENT", "ORDER_CONFIRMATION", "COMPENSATION", "CUSTOMER_VERIFICATION"}
	sagaStepStatuses = [...]string{"STARTED", "COMPLETED", "FAILED"}
)

func (s SagaStep) Name() string   { return sagaStepNames[s.name] }
func (s SagaStep) Status() string { return sagaStepStatuses[s.status] }

// newSagaStep is the step name, status at now; both must be known (the
// saga's code names them as constants).
func newSagaStep(name, status string, now int64) SagaStep {
	n, ok1 := indexOf(sagaStepNames[:], name)
	st, ok2 := indexOf(sagaStepStatuses[:], status)
	if !ok1 || !ok2 {
		panic("commerce: unknown saga step " + name + " " + status)
	}
	return SagaStep{name: n, status: st, At: now}
}

func indexOf(list []string, s string) (uint8, bool) {
	for i, x := range list {
		if x == s {
			return uint8(i), true
		}
	}
	return 0, false
}

// Saga of one order; its id is the order id.
type Saga struct {
	ID, Type, Status string
	Steps            []SagaStep
	StartedAt        int64
	UpdatedAt        int64
	// Products are the order's distinct products, sorted; waiting counts
	// those that have not answered the reservation yet.
	Products      []string
	waiting       int
	paymentAsked  bool
	FailureReason string
	// RetentionNs is how long the saga is kept once it has ended (0: for
	// ever), from its logged CreateOrder.
	RetentionNs int64
	// closePayment: the saga's CreateOrder had ClosePayment, so its
	// compensation tells the payment's partition, asked or not.
	closePayment bool
}

// Terminal reports whether the saga has ended.
func (s *Saga) Terminal() bool {
	switch s.Status {
	case SagaCompleted, SagaCompensated, SagaFailed, SagaTimedOut:
		return true
	}
	return false
}

// Payment of an order.
type Payment struct {
	ID, OrderID, CustomerID string
	AmountCents             int64
	Currency, Method        string
	Status                  string
	TransactionID           string
	FailureReason           string
	Saga                    bool // made by the order's saga, not by POST /api/payments
	CreatedAt, UpdatedAt    int64
}

// Machine is the commerce state of one partition.
type Machine struct {
	customers map[string]*Customer
	products  map[string]*Product
	orders    map[string]*Order
	sagas     map[string]*Saga
	payments  map[string]*Payment // by order id
	// closedOrders are orders whose RefundForOrder came while no payment
	// existed: a later request to pay them is refused.
	closedOrders map[string]bool
	// events by entity key (c/…, p/…, o/…, pay/…), append-only.
	events map[string]*eventLog
	// purgeQ holds what is to be purged, in the order it ended: ended
	// sagas and closed-order markers with a retention. See purgeTimerID.
	purgeQ retain.Queue[purgeEntry]
	// skus maps a sku whose SKUKey is in this partition to the product
	// that claimed it. Products created before the index (by a client
	// CreateProduct) are not in it.
	skus map[string]string
	// dlq is the dead-letter queue and the fault switch (dlq.go).
	dlq dlq
}

// purgeEntry is one queued purge: the saga (or, marker set, the
// closedOrders marker) of OrderID goes at At.
type purgeEntry struct {
	OrderID string
	At      int64
	Marker  bool
}

func (e purgeEntry) Due() int64 { return e.At }

// NewMachine returns an empty partition.
func NewMachine() *Machine {
	return &Machine{
		customers:    map[string]*Customer{},
		products:     map[string]*Product{},
		orders:       map[string]*Order{},
		sagas:        map[string]*Saga{},
		payments:     map[string]*Payment{},
		closedOrders: map[string]bool{},
		events:       map[string]*eventLog{},
		skus:         map[string]string{},
	}
}

// Outcome of a command, for the API layer to map to a status.
type Outcome uint8

const (
	OK            Outcome = iota // applied (200)
	Created                      // a new entity (201)
	Same                         // already so; nothing changed (200)
	NotFound                     // unknown id (404)
	Invalid                      // bad input (400)
	Conflict                     // not enough stock, not refundable, wrong state (409)
	Unprocessable                // valid but not possible now (422)
	Ignored                      // a saga message that no longer matters
)

// Result is the reply of every command. The entity pointers are copies,
// safe to read on another goroutine.
type Result struct {
	Outcome  Outcome
	Msg      string
	Customer *Customer
	Product  *Product
	Order    *Order
	Saga     *Saga
	Payment  *Payment
}

// OrderChanged is notified when an order reaches a terminal status
// (CONFIRMED or CANCELLED); its saga has then ended too. StartedAt and
// EndedAt are the saga's logged start and end (SagaMetrics).
type OrderChanged struct {
	OrderID, Status, SagaStatus string
	StartedAt, EndedAt          int64
}

// Apply implements engine.Machine.
func (m *Machine) Apply(in *engine.Input, fx *engine.Effects) {
	now := in.TimeNs
	var res *Result
	if _, ok := in.Cmd.(sagaMessage); ok && in.Kind == engine.FromClient {
		// Saga messages come from partitions, never from a client: one
		// forged by a client could confirm an order nobody paid for.
		res = invalid("commerce: %T is a saga message, not a client command", in.Cmd)
	} else {
		res = m.apply(in, now, fx)
	}
	if res.Outcome != OK && res.Outcome != Created {
		fx.Unchanged()
	}
	fx.Reply(res)
}

func (m *Machine) apply(in *engine.Input, now int64, fx *engine.Effects) *Result {
	if res := m.applyDLQ(in, now, fx); res != nil {
		return res
	}
	switch c := in.Cmd.(type) {
	case *CreateCustomer:
		return m.createCustomer(c, now)
	case *UpdateCustomer:
		return m.updateCustomer(c, now)
	case *SetCustomerStatus:
		return m.setCustomerStatus(c, now)
	case *CreateProduct:
		return m.createProduct(c, now)
	case *ClaimSKU:
		return m.claimSKU(c, fx)
	case *ReserveStock:
		return m.reserveStock(c, now)
	case *ReleaseStock:
		return m.releaseStock(c, now)
	case *ReplenishStock:
		return m.replenishStock(c, now)
	case *CreateOrder:
		return m.createOrder(c, now, fx)
	case *ConfirmOrder:
		return m.confirmOrder(c)
	case *CancelOrder:
		return m.cancelOrder(c, now, fx)
	case *CreatePayment:
		return m.createPayment(c, now)
	case *RefundPayment:
		return m.refundPayment(c, now)
	case *ReserveForOrder:
		return m.reserveForOrder(c, now, fx)
	case *ReleaseForOrder:
		return m.releaseForOrder(c, now)
	case *CommitForOrder:
		return m.commitForOrder()
	case *ReleaseConfirmedOrder:
		return m.releaseConfirmedOrder(c, now)
	case *VerifyCustomerForOrder:
		return m.verifyCustomer(c, fx)
	case *CustomerVerified:
		return m.customerAnswer(c, now, fx)
	case *StockReserved:
		return m.stockAnswer(c.OrderID, c.ProductID, "", now, fx)
	case *StockFailed:
		return m.stockAnswer(c.OrderID, c.ProductID, c.Reason, now, fx)
	case *ProcessPaymentForOrder:
		return m.processPayment(c, now, fx)
	case *RefundForOrder:
		return m.refundForOrder(c, now, fx)
	case *PaymentProcessed:
		return m.paymentAnswer(c.OrderID, c.PaymentID, "", now, fx)
	case *PaymentFailed:
		return m.paymentAnswer(c.OrderID, "", c.Reason, now, fx)
	case *SagaDeadline:
		if in.Kind != engine.FromTimer {
			return invalid("commerce: a saga deadline is applied by its timer only")
		}
		return m.deadline(c, now, fx)
	case *PurgeSagas:
		if in.Kind != engine.FromTimer {
			return invalid("commerce: a purge is applied by its timer only")
		}
		return m.purge(now, fx)
	}
	return invalid("commerce: unknown command %T", in.Cmd)
}

func invalid(format string, a ...any) *Result {
	return &Result{Outcome: Invalid, Msg: fmt.Sprintf(format, a...)}
}

// MaxEventsPerEntity bounds an entity's event history: a product that
// every order touches gains two events per order, which in a long run
// would grow without limit. Once a history holds twice this many, the
// oldest are dropped down to this many (in one copy, so the cost per event
// stays constant); sequence numbers continue, so a reader can tell.
const MaxEventsPerEntity = 1000

func (m *Machine) event(key, typ string, now int64, kv ...string) {
	l := m.events[key]
	if l == nil {
		l = &eventLog{}
		m.events[key] = l
	}
	l.add(typ, now, kv)
}

func validText(name, s string, min, max int) string {
	if n := len([]rune(s)); n < min || n > max {
		if min > 0 {
			return fmt.Sprintf("%s must be %d to %d characters", name, min, max)
		}
		return fmt.Sprintf("%s must be at most %d characters", name, max)
	}
	return ""
}

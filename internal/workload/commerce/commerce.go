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
// /api/payments refund by hand. Late and duplicate answers to a terminal order change nothing.
//
// Only a command that changes state is logged: every rejection is
// declared Unchanged.
package commerce

import (
	"fmt"
	"math"
	"sort"
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
// (CONFIRMED or CANCELLED); its saga has then ended too.
type OrderChanged struct {
	OrderID, Status, SagaStatus string
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

// --- customers ---

func validCustomer(email, name, address, phone string) string {
	if msg := validText("email", email, 3, MaxTextLen); msg != "" {
		return msg
	}
	if at := strings.IndexByte(email, '@'); at <= 0 || at == len(email)-1 {
		return "email must look like name@domain"
	}
	for _, t := range [][3]any{{"name", name, 2}, {"address", address, 0}, {"phone", phone, 0}} {
		max := MaxTextLen
		if t[0] == "name" {
			max = 100
		}
		if msg := validText(t[0].(string), t[1].(string), t[2].(int), max); msg != "" {
			return msg
		}
	}
	return ""
}

func (m *Machine) createCustomer(c *CreateCustomer, now int64) *Result {
	if c.ID == "" {
		return invalid("customerId must not be empty")
	}
	if old := m.customers[c.ID]; old != nil {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("customer %q already exists", c.ID)}
	}
	if msg := validCustomer(c.Email, c.Name, c.Address, c.Phone); msg != "" {
		return invalid("%s", msg)
	}
	cu := &Customer{ID: c.ID, Email: c.Email, Name: c.Name, Address: c.Address, Phone: c.Phone, Status: CustomerActive, CreatedAt: now, UpdatedAt: now}
	m.customers[c.ID] = cu
	m.event(CustomerKey(c.ID), "CustomerCreated", now, "email", c.Email, "name", c.Name, "status", CustomerActive)
	cp := *cu
	return &Result{Outcome: Created, Customer: &cp}
}

func (m *Machine) updateCustomer(c *UpdateCustomer, now int64) *Result {
	cu := m.customers[c.ID]
	if cu == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("customer %q not found", c.ID)}
	}
	if msg := validCustomer(c.Email, c.Name, c.Address, c.Phone); msg != "" {
		return invalid("%s", msg)
	}
	if cu.Email == c.Email && cu.Name == c.Name && cu.Address == c.Address && cu.Phone == c.Phone {
		cp := *cu
		return &Result{Outcome: Same, Customer: &cp}
	}
	cu.Email, cu.Name, cu.Address, cu.Phone, cu.UpdatedAt = c.Email, c.Name, c.Address, c.Phone, now
	m.event(CustomerKey(c.ID), "CustomerUpdated", now, "email", c.Email, "name", c.Name, "address", c.Address, "phone", c.Phone)
	cp := *cu
	return &Result{Outcome: OK, Customer: &cp}
}

func (m *Machine) setCustomerStatus(c *SetCustomerStatus, now int64) *Result {
	cu := m.customers[c.ID]
	if cu == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("customer %q not found", c.ID)}
	}
	switch c.Status {
	case CustomerActive, CustomerSuspended, CustomerClosed:
	default:
		return invalid("status must be ACTIVE, SUSPENDED or CLOSED")
	}
	if msg := validText("reason", c.Reason, 0, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if cu.Status == c.Status {
		cp := *cu
		return &Result{Outcome: Same, Customer: &cp}
	}
	if cu.Status == CustomerClosed {
		return &Result{Outcome: Conflict, Msg: "a CLOSED customer cannot be reopened"}
	}
	m.event(CustomerKey(c.ID), "CustomerStatusChanged", now, "from", cu.Status, "to", c.Status, "reason", c.Reason)
	cu.Status, cu.UpdatedAt = c.Status, now
	cp := *cu
	return &Result{Outcome: OK, Customer: &cp}
}

// --- products and stock ---

func (p *Product) copy() *Product {
	cp := *p
	cp.resv = nil // the map stays with the partition
	return &cp
}

func (m *Machine) createProduct(c *CreateProduct, now int64) *Result {
	if c.ID == "" {
		return invalid("productId must not be empty")
	}
	if m.products[c.ID] != nil {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("product %q already exists", c.ID)}
	}
	if res := checkProduct(c); res != nil {
		return res
	}
	p := &Product{ID: c.ID, SKU: c.SKU, Name: c.Name, Description: c.Description, Category: c.Category,
		PriceCents: c.PriceCents, OnHand: c.OnHand, CreatedAt: now, UpdatedAt: now, resv: map[string]reservation{}}
	m.products[c.ID] = p
	m.event(ProductKey(c.ID), "ProductCreated", now, "sku", c.SKU, "price", FormatMoney(c.PriceCents), "quantityOnHand", itoa(c.OnHand))
	return &Result{Outcome: Created, Product: p.copy()}
}

// claimSKU checks the whole product here, so the CreateProduct it sends
// cannot be refused at the product's partition and leave a claim that
// names no product.
func (m *Machine) claimSKU(c *ClaimSKU, fx *engine.Effects) *Result {
	cp := (*CreateProduct)(c)
	if c.ID == "" {
		return invalid("productId must not be empty")
	}
	if res := checkProduct(cp); res != nil {
		return res
	}
	switch owner, ok := m.skus[c.SKU]; {
	case ok && owner == c.ID:
		return &Result{Outcome: Same}
	case ok:
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("sku %q is already used by product %q", c.SKU, owner)}
	}
	if err := fx.Send(ProductKey(c.ID), WorkloadID, cp); err != nil {
		return invalid("%v", err)
	}
	m.skus[c.SKU] = c.ID
	return &Result{Outcome: Created}
}

func checkProduct(c *CreateProduct) *Result {
	for _, t := range [][2]string{{"sku", c.SKU}, {"name", c.Name}} {
		if msg := validText(t[0], t[1], 1, MaxTextLen); msg != "" {
			return invalid("%s", msg)
		}
	}
	if msg := validText("description", c.Description, 0, 4*MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if msg := validText("category", c.Category, 0, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if c.PriceCents < 1 || c.PriceCents > MaxMoneyCents {
		return invalid("price must be between 0.01 and %s", FormatMoney(MaxMoneyCents))
	}
	if c.OnHand < 0 || c.OnHand > maxStockUnits {
		return invalid("quantityOnHand must be between 0 and %d", maxStockUnits)
	}
	return nil
}

func itoa(v int64) string { return fmt.Sprint(v) }

func validQty(q int64) string {
	if q < 1 || q > MaxQuantity {
		return fmt.Sprintf("quantity must be between 1 and %d", MaxQuantity)
	}
	return ""
}

// reserve is the one place stock is reserved: the check and the change
// are in the same Apply, so two reservations can never both pass a check
// against the same stale stock (the peer's oversell).
func (m *Machine) reserve(p *Product, orderID string, qty int64, saga bool, now int64) string {
	if _, ok := p.resv[orderID]; ok {
		return fmt.Sprintf("stock of product %q is already reserved for order %q", p.ID, orderID)
	}
	if p.Available() < qty {
		return fmt.Sprintf("not enough stock of product %q: %d available, %d asked", p.ID, p.Available(), qty)
	}
	p.resv[orderID] = reservation{qty: qty, saga: saga}
	p.Reserved += qty
	p.UpdatedAt = now
	m.event(ProductKey(p.ID), "StockReserved", now, "orderId", orderID, "quantity", itoa(qty))
	return ""
}

func (m *Machine) reserveStock(c *ReserveStock, now int64) *Result {
	p := m.products[c.ProductID]
	if p == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("product %q not found", c.ProductID)}
	}
	if msg := validQty(c.Quantity); msg != "" {
		return invalid("%s", msg)
	}
	if msg := validText("orderId", c.OrderID, 1, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if r, ok := p.resv[c.OrderID]; ok && !r.saga && r.qty == c.Quantity {
		// A retried request: the reservation it asked for exists.
		return &Result{Outcome: Same, Product: p.copy()}
	}
	if msg := m.reserve(p, c.OrderID, c.Quantity, false, now); msg != "" {
		return &Result{Outcome: Conflict, Msg: msg, Product: p.copy()}
	}
	return &Result{Outcome: OK, Product: p.copy()}
}

// release gives back qty of orderID's reservation (all of it if qty is 0).
func (m *Machine) release(p *Product, orderID string, qty int64, reason string, now int64) {
	r := p.resv[orderID]
	if qty == 0 || qty > r.qty {
		qty = r.qty
	}
	r.qty -= qty
	if r.qty == 0 {
		delete(p.resv, orderID)
	} else {
		p.resv[orderID] = r
	}
	p.Reserved -= qty
	p.UpdatedAt = now
	m.event(ProductKey(p.ID), "StockReleased", now, "orderId", orderID, "quantity", itoa(qty), "reason", reason)
}

func (m *Machine) releaseStock(c *ReleaseStock, now int64) *Result {
	p := m.products[c.ProductID]
	if p == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("product %q not found", c.ProductID)}
	}
	if msg := validQty(c.Quantity); msg != "" {
		return invalid("%s", msg)
	}
	if msg := validText("reason", c.Reason, 0, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	r, ok := p.resv[c.OrderID]
	if !ok {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("product %q has no reservation for order %q", c.ProductID, c.OrderID), Product: p.copy()}
	}
	if r.saga {
		// Releasing it by hand would let the saga sell stock it no longer holds.
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("the reservation for order %q belongs to its saga; cancel the order instead", c.OrderID), Product: p.copy()}
	}
	if c.Quantity > r.qty {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("order %q holds %d reserved, cannot release %d", c.OrderID, r.qty, c.Quantity), Product: p.copy()}
	}
	m.release(p, c.OrderID, c.Quantity, c.Reason, now)
	return &Result{Outcome: OK, Product: p.copy()}
}

func (m *Machine) replenishStock(c *ReplenishStock, now int64) *Result {
	p := m.products[c.ProductID]
	if p == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("product %q not found", c.ProductID)}
	}
	if msg := validQty(c.Quantity); msg != "" {
		return invalid("%s", msg)
	}
	if msg := validText("reason", c.Reason, 0, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if p.OnHand+c.Quantity > maxStockUnits {
		return &Result{Outcome: Unprocessable, Msg: fmt.Sprintf("quantityOnHand would exceed %d", maxStockUnits), Product: p.copy()}
	}
	p.OnHand += c.Quantity
	p.UpdatedAt = now
	m.event(ProductKey(p.ID), "StockReplenished", now, "quantity", itoa(c.Quantity), "reason", c.Reason)
	return &Result{Outcome: OK, Product: p.copy()}
}

func (m *Machine) reserveForOrder(c *ReserveForOrder, now int64, fx *engine.Effects) *Result {
	reply := func(reason string) *Result {
		var msg engine.Command = &StockReserved{OrderID: c.OrderID, ProductID: c.ProductID}
		if reason != "" {
			msg = &StockFailed{OrderID: c.OrderID, ProductID: c.ProductID, Reason: reason}
		}
		if err := fx.Send(OrderKey(c.OrderID), WorkloadID, msg); err != nil {
			return invalid("%v", err)
		}
		// Sending the answer is a change even when the stock is not.
		return &Result{Outcome: OK, Msg: reason}
	}
	p := m.products[c.ProductID]
	if p == nil {
		return reply(fmt.Sprintf("product %q not found", c.ProductID))
	}
	if msg := m.reserve(p, c.OrderID, c.Quantity, true, now); msg != "" {
		return reply(msg)
	}
	return reply("")
}

func (m *Machine) releaseForOrder(c *ReleaseForOrder, now int64) *Result {
	p := m.products[c.ProductID]
	if p == nil {
		return &Result{Outcome: Ignored}
	}
	if r, ok := p.resv[c.OrderID]; !ok || !r.saga {
		// Never reserved (it failed, or the product was not found).
		return &Result{Outcome: Ignored}
	}
	m.release(p, c.OrderID, 0, c.Reason, now)
	return &Result{Outcome: OK}
}

// commitForOrder changes nothing: a confirmed order's units stay
// reserved until a cancel releases them (the peer's stock model: only
// reserve, release and replenish). Older builds took them from
// quantityOnHand here; the order's partition still sends the message at
// confirmation, because replaying a log written by such a build must send
// what it sent, or every later message's sequence number would shift and
// the receivers would drop them as duplicates.
func (m *Machine) commitForOrder() *Result { return &Result{Outcome: Ignored} }

// releaseConfirmedOrder gives back a cancelled CONFIRMED order's units.
// A confirmed order's saga reservation is released only here, once (the
// order is then CANCELLED), so when there is none an older build
// committed the units at confirmation: they go back to quantityOnHand,
// and no unit is lost either way.
func (m *Machine) releaseConfirmedOrder(c *ReleaseConfirmedOrder, now int64) *Result {
	p := m.products[c.ProductID]
	if p == nil {
		return &Result{Outcome: Ignored}
	}
	if r, ok := p.resv[c.OrderID]; ok && r.saga {
		m.release(p, c.OrderID, 0, c.Reason, now)
		return &Result{Outcome: OK}
	}
	if c.Quantity < 1 {
		return &Result{Outcome: Ignored}
	}
	p.OnHand += c.Quantity
	p.UpdatedAt = now
	m.event(ProductKey(p.ID), "StockReturned", now, "orderId", c.OrderID, "quantity", itoa(c.Quantity), "reason", c.Reason)
	return &Result{Outcome: OK}
}

// --- orders and the saga ---

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
	perProduct := map[string]int64{}
	var subtotal int64
	for i, it := range c.Items {
		if msg := validText("productId", it.ProductID, 1, MaxTextLen); msg != "" {
			return invalid("lineItems[%d]: %s", i, msg)
		}
		if msg := validQty(it.Quantity); msg != "" {
			return invalid("lineItems[%d]: %s", i, msg)
		}
		if it.UnitPriceCents < 0 || it.UnitPriceCents > MaxMoneyCents {
			return invalid("lineItems[%d]: unitPrice must be between 0.00 and %s", i, FormatMoney(MaxMoneyCents))
		}
		for _, t := range [][2]string{{"productName", it.ProductName}, {"sku", it.SKU}} {
			if msg := validText(t[0], t[1], 0, MaxTextLen); msg != "" {
				return invalid("lineItems[%d]: %s", i, msg)
			}
		}
		if perProduct[it.ProductID]+it.Quantity > MaxQuantity {
			return invalid("at most %d of product %q per order", MaxQuantity, it.ProductID)
		}
		perProduct[it.ProductID] += it.Quantity
		subtotal += it.Quantity * it.UnitPriceCents // ≤ 100 × 1e6 × 1e10: no overflow
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
	// Encode every message before changing anything, so a refusal leaves
	// no half-made order behind.
	for _, p := range products {
		if err := fx.Send(ProductKey(p), WorkloadID, &ReserveForOrder{OrderID: c.OrderID, ProductID: p, Quantity: perProduct[p]}); err != nil {
			return invalid("%v", err)
		}
	}
	waiting := len(products)
	if c.VerifyCustomer {
		if err := fx.Send(CustomerKey(c.CustomerID), WorkloadID, &VerifyCustomerForOrder{OrderID: c.OrderID, CustomerID: c.CustomerID}); err != nil {
			return invalid("%v", err)
		}
		waiting++ // the payment waits for the customer's answer too
	}
	if err := fx.SetTimer(deadlineTimer(c.OrderID), o.Deadline, &SagaDeadline{OrderID: c.OrderID}); err != nil {
		return invalid("%v", err)
	}
	s := &Saga{ID: c.OrderID, Type: SagaType, Status: SagaStarted, StartedAt: now, UpdatedAt: now, Products: products, waiting: waiting, RetentionNs: c.RetentionNs}
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
// it) and a requested payment is told to refund.
func (m *Machine) compensate(o *Order, s *Saga, final, reason string, now int64, fx *engine.Effects) *Result {
	for _, p := range s.Products {
		if err := fx.Send(ProductKey(p), WorkloadID, &ReleaseForOrder{OrderID: o.ID, ProductID: p, Reason: reason}); err != nil {
			return invalid("%v", err)
		}
	}
	if s.paymentAsked {
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
	fx.Notify(OrderChanged{OrderID: o.ID, Status: o.Status, SagaStatus: s.Status})
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
	if err := fx.Send(PaymentKey(o.ID), WorkloadID, &ProcessPaymentForOrder{OrderID: o.ID, CustomerID: o.CustomerID, AmountCents: o.Total, Method: o.PaymentMethod}); err != nil {
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
		// The payment failed, so there is nothing to refund.
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
	fx.Notify(OrderChanged{OrderID: o.ID, Status: o.Status, SagaStatus: s.Status})
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

// --- payments ---

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
		// Exactly one payment per order: one made directly for this order
		// id is not the saga's to take.
		return answer("", fmt.Sprintf("order already has payment %s", old.ID))
	}
	p := m.pay(c.OrderID, c.CustomerID, c.AmountCents, "USD", c.Method, true, now)
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
		m.closedOrders[c.OrderID] = true
		m.retire(c.OrderID, true, now, c.RetentionNs, fx)
		m.event(PaymentKey(c.OrderID), "PaymentRefusedForCancelledOrder", now, "reason", c.Reason)
		return &Result{Outcome: OK}
	}
	if !p.Saga || p.Status != PaymentCaptured {
		return &Result{Outcome: Ignored}
	}
	m.refund(p, c.Reason, now)
	return &Result{Outcome: OK}
}

// --- retention ---

// Retention works as in the ticketing workload (docs/ARCHITECTURE.md,
// "Retention of terminal records"). The retention is carried in the
// logged CreateOrder (the API fills it in from --saga-retention), kept in
// the Saga and passed on in RefundForOrder, and the purge time is the
// logged time of the input that ended the saga plus it, never a setting
// of the process applying it: replay must purge exactly what the live
// run purged, even if the flag changed in between, and the engine's timer
// table, which replay rebuilds by re-running SetTimer, then gets the same
// deadlines.
//
// A timer per saga would cost more than the purge saves, so each
// partition keeps one FIFO of ended sagas and closed-order markers in the
// order they ended, and one engine timer (purgeTimerID) armed for the
// head's time. When it fires (a logged FromTimer input applying
// PurgeSagas), every due entry is purged, at most maxPurgePerFiring at a
// time so a partition never stalls long, and the timer is re-armed for
// the new head (at once if more are due). If the retention is lowered,
// entries made under the longer one hold back the ones queued behind
// them until they are due: an entry is purged at or after its time, never
// before. The FIFO is part of the snapshot, in queue order.
//
// Only the saga record and the marker go: the order, its payment and
// every event stay (users query them; TestBytesPerOrder measures them).
// A purged saga's late messages find no running saga and are ignored, as
// they were once it had ended; a direct payment for an order whose marker
// was purged is no longer refused.
const (
	// purgeTimerID cannot collide with a deadline timer ("saga/<id>").
	purgeTimerID      = "commerce/purge"
	maxPurgePerFiring = 4096
)

// retire queues the saga of orderID (marker: its closed-order marker)
// for purging after retention (0: kept for ever) and arms the purge
// timer if the queue was empty.
func (m *Machine) retire(orderID string, marker bool, now, retention int64, fx *engine.Effects) {
	if retention <= 0 {
		return
	}
	at := now + retention
	if at < now {
		at = math.MaxInt64
	}
	if m.purgeQ.Push(purgeEntry{OrderID: orderID, At: at, Marker: marker}) {
		m.armPurge(at, fx)
	}
}

func (m *Machine) armPurge(at int64, fx *engine.Effects) {
	// PurgeSagas has no fields, so it always encodes and the id is short:
	// SetTimer cannot refuse it.
	if err := fx.SetTimer(purgeTimerID, at, &PurgeSagas{}); err != nil {
		panic(err)
	}
}

// purge removes the due entries at the head of the queue, at most
// maxPurgePerFiring, and re-arms the timer for the next one.
func (m *Machine) purge(now int64, fx *engine.Effects) *Result {
	n := m.purgeQ.PopDue(now, maxPurgePerFiring, func(e purgeEntry) {
		if e.Marker {
			delete(m.closedOrders, e.OrderID)
		} else {
			delete(m.sagas, e.OrderID)
		}
	})
	if at, ok := m.purgeQ.Next(); ok {
		// Due already only if the limit stopped this firing: then at once.
		m.armPurge(max(at, now), fx)
	}
	return &Result{Outcome: OK, Msg: fmt.Sprintf("purged %d", n)}
}

// --- queries ---

// Query types; each answers from this partition only (the API fans the
// list queries out to every partition).
type (
	GetCustomer      struct{ ID string }
	ListCustomers    struct{ Limit int }
	GetProduct       struct{ ID string }
	ListProducts     struct{ Limit int }
	GetOrder         struct{ ID string }
	ListOrders       struct{ Limit int }
	OrdersByCustomer struct {
		CustomerID string
		Limit      int
	}
	GetSaga   struct{ ID string }
	ListSagas struct {
		Status, Type string // "" matches any
		Limit        int
	}
	GetPayment     struct{ ID string }
	PaymentByOrder struct{ OrderID string }
	// Events of an entity key (CustomerKey, ProductKey, OrderKey,
	// PaymentKey), oldest first, at most Limit (the newest ones).
	Events struct {
		Key   string
		Limit int
	}
)

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func limit(n, max int) int {
	if n <= 0 || n > max {
		return max
	}
	return n
}

// Query implements engine.Machine. A found entity is a copy (nil if not
// found); lists are sorted by id and hold at most Limit entries.
func (m *Machine) Query(q any) any {
	if v, ok := m.queryDLQ(q); ok {
		return v
	}
	switch q := q.(type) {
	case *GetCustomer:
		if c := m.customers[q.ID]; c != nil {
			cp := *c
			return &cp
		}
		return (*Customer)(nil)
	case *ListCustomers:
		var out []Customer
		for _, k := range sortedKeys(m.customers)[:limit(q.Limit, len(m.customers))] {
			out = append(out, *m.customers[k])
		}
		return out
	case *GetProduct:
		if p := m.products[q.ID]; p != nil {
			return p.copy()
		}
		return (*Product)(nil)
	case *ListProducts:
		var out []Product
		for _, k := range sortedKeys(m.products)[:limit(q.Limit, len(m.products))] {
			out = append(out, *m.products[k].copy())
		}
		return out
	case *GetOrder:
		if o := m.orders[q.ID]; o != nil {
			return o.copy()
		}
		return (*Order)(nil)
	case *ListOrders:
		var out []Order
		for _, k := range sortedKeys(m.orders)[:limit(q.Limit, len(m.orders))] {
			out = append(out, *m.orders[k].copy())
		}
		return out
	case *OrdersByCustomer:
		var out []Order
		for _, k := range sortedKeys(m.orders) {
			if o := m.orders[k]; o.CustomerID == q.CustomerID && (q.Limit <= 0 || len(out) < q.Limit) {
				out = append(out, *o.copy())
			}
		}
		return out
	case *GetSaga:
		if s := m.sagas[q.ID]; s != nil {
			return s.copy()
		}
		return (*Saga)(nil)
	case *ListSagas:
		var out []Saga
		for _, k := range sortedKeys(m.sagas) {
			s := m.sagas[k]
			if (q.Status == "" || s.Status == q.Status) && (q.Type == "" || s.Type == q.Type) && (q.Limit <= 0 || len(out) < q.Limit) {
				out = append(out, *s.copy())
			}
		}
		return out
	case *GetPayment:
		if o, ok := OrderOfPaymentID(q.ID); ok {
			if p := m.payments[o]; p != nil {
				cp := *p
				return &cp
			}
		}
		return (*Payment)(nil)
	case *PaymentByOrder:
		if p := m.payments[q.OrderID]; p != nil {
			cp := *p
			return &cp
		}
		return (*Payment)(nil)
	case *Events:
		l := m.events[q.Key]
		if l == nil {
			return []Event{}
		}
		return l.newest(limit(q.Limit, l.n))
	}
	return nil
}

// Workload is the commerce workload for the engine.
type Workload struct{}

func (Workload) ID() uint8                               { return WorkloadID }
func (Workload) Name() string                            { return "commerce" }
func (Workload) NewMachine(partition int) engine.Machine { return newMachineAt(partition) }

// WireTypes lists the queries, replies and notes that cross between nodes
// in cluster mode (engine.WireTypes).
func (Workload) WireTypes() []any {
	return []any{&Result{}, OrderChanged{},
		&GetCustomer{}, &ListCustomers{}, &GetProduct{}, &ListProducts{}, &GetOrder{}, &ListOrders{}, &OrdersByCustomer{},
		&GetSaga{}, &ListSagas{}, &GetPayment{}, &PaymentByOrder{}, &Events{},
		&Customer{}, []Customer{}, &Product{}, []Product{}, &Order{}, []Order{}, &Saga{}, []Saga{}, &Payment{}, []Event{},
		&ListDLQ{}, &GetDLQ{}, &StatsDLQ{}, &DLQEntry{}, []DLQEntry{}, &DLQStats{}}
}

package commerce

import (
	"errors"
	"fmt"
	"maps"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/retain"
	"github.com/surge-run/surge/internal/wire"
)

// Command encoding, version 1: a tag byte, then the fields in order. Each
// type describes its fields once, in code, for both directions (see
// wire.Coder), so encoder and decoder cannot drift apart. Tags are
// logged: never reuse or renumber one.
const (
	tagCreateCustomer = 1 + iota
	tagUpdateCustomer
	tagSetCustomerStatus
	tagCreateProduct
	tagReserveStock
	tagReleaseStock
	tagReplenishStock
	tagCreateOrder
	tagConfirmOrder
	tagCancelOrder
	tagCreatePayment
	tagRefundPayment
	tagReserveForOrder
	tagReleaseForOrder
	tagCommitForOrder
	tagStockReserved
	tagStockFailed
	tagProcessPaymentForOrder
	tagRefundForOrder
	tagPaymentProcessed
	tagPaymentFailed
	tagSagaDeadline
	tagPurgeSagas
	tagClaimSKU
	tagSetFault
	tagReplayDLQ
	tagDiscardDLQ
)

// Tags added for cancelling confirmed orders and verifying unknown
// customers in the saga. They start at 40, apart from the list above:
// tags are never renumbered, so a gap costs nothing and keeps commands
// added elsewhere from taking the same numbers.
const (
	// tagCreateOrderVerify is a CreateOrder with VerifyCustomer set; the
	// flag is the tag, so a CreateOrder logged before it decodes as it was.
	tagCreateOrderVerify = 40 + iota
	tagVerifyCustomerForOrder
	tagCustomerVerified
	tagReleaseConfirmedOrder
	// tagProcessPaymentTake is a ProcessPaymentForOrder with Take set:
	// the flag is the tag, so a request logged before it (whose answer
	// receivers have already numbered) replays as it was answered.
	tagProcessPaymentTake
	// tagCreateOrderClose and tagCreateOrderVerifyClose are a CreateOrder
	// with ClosePayment set (and VerifyCustomer): the flag is the tag, so
	// an order logged before it replays with the messages it sent then.
	tagCreateOrderClose
	tagCreateOrderVerifyClose
)

// Client commands.
type (
	CreateCustomer struct{ ID, Email, Name, Address, Phone string }
	UpdateCustomer struct{ ID, Email, Name, Address, Phone string }
	// SetCustomerStatus: ACTIVE, SUSPENDED or CLOSED (final).
	SetCustomerStatus struct{ ID, Status, Reason string }
	CreateProduct     struct {
		ID, SKU, Name, Description, Category string
		PriceCents, OnHand                   int64
	}
	// ReserveStock is the direct POST /api/products/{id}/stock/reserve.
	ReserveStock struct {
		ProductID, OrderID string
		Quantity           int64
	}
	ReleaseStock struct {
		ProductID, OrderID string
		Quantity           int64
		Reason             string
	}
	ReplenishStock struct {
		ProductID string
		Quantity  int64
		Reason    string
	}
	// CreateOrder starts the saga. The gateway fills missing unit prices
	// from the product and chooses DeadlineNs (the configured saga
	// deadline) and RetentionNs (how long the saga is kept once it has
	// ended; 0: for ever), which are logged so replay arms the same
	// timers and purges the same sagas whatever the flags say then.
	CreateOrder struct {
		OrderID, CustomerID                          string
		Items                                        []LineItem
		ShippingAddress, CustomerName, CustomerEmail string
		PaymentMethod                                string
		DeadlineNs                                   int64
		RetentionNs                                  int64
		// VerifyCustomer has the saga ask the customer's partition whether
		// the customer exists before it pays (the API sets it when its own
		// lookup found none): the order is accepted, and the saga cancels
		// it if the customer is still unknown.
		VerifyCustomer bool
		// ClosePayment has a saga that ends without its payment tell the
		// payment's partition all the same (RefundForOrder): a payment the
		// client made directly for the order is refunded, and a later one
		// refused. The API sets it on every order.
		ClosePayment bool
	}
	ConfirmOrder struct{ OrderID string }
	CancelOrder  struct{ OrderID, Reason, CancelledBy string }
	// CreatePayment is the direct POST /api/payments.
	CreatePayment struct {
		OrderID, CustomerID string
		AmountCents         int64
		Currency, Method    string
	}
	RefundPayment struct{ PaymentID, Reason string }
	// ClaimSKU is POST /api/products, applied at SKUKey(SKU): products
	// are keyed by id, so only the sku's own partition can tell whether
	// another product has it. It claims the sku and sends CreateProduct
	// to the product's partition as a message, which the engine delivers
	// exactly once: no claim without its product.
	ClaimSKU CreateProduct
)

// Saga messages between partitions, and the deadline timer's command.
// Apply refuses them from a client.
type (
	ReserveForOrder struct {
		OrderID, ProductID string
		Quantity           int64
	}
	ReleaseForOrder        struct{ OrderID, ProductID, Reason string }
	CommitForOrder         struct{ OrderID, ProductID string }
	StockReserved          struct{ OrderID, ProductID string }
	StockFailed            struct{ OrderID, ProductID, Reason string }
	ProcessPaymentForOrder struct {
		OrderID, CustomerID string
		AmountCents         int64
		Method              string
		// Take: a payment made directly for the order that charged what
		// this request would is the order's (processPayment).
		Take bool
	}
	// RefundForOrder carries the saga's retention: a closed-order marker
	// it leaves is purged after it, like the saga.
	RefundForOrder struct {
		OrderID, Reason string
		RetentionNs     int64
	}
	PaymentProcessed struct{ OrderID, PaymentID string }
	PaymentFailed    struct{ OrderID, Reason string }
	SagaDeadline     struct{ OrderID string }
	// VerifyCustomerForOrder asks the customer's partition; it answers
	// CustomerVerified, with the reason the order cannot go on, or "".
	VerifyCustomerForOrder struct{ OrderID, CustomerID string }
	CustomerVerified       struct{ OrderID, CustomerID, Reason string }
	// ReleaseConfirmedOrder gives back a cancelled CONFIRMED order's
	// units of one product: its reservation, or, if an older build
	// committed them when it confirmed the order (took them from
	// quantityOnHand), Quantity units back to quantityOnHand.
	ReleaseConfirmedOrder struct {
		OrderID, ProductID string
		Quantity           int64
		Reason             string
	}
	// PurgeSagas is the command of a partition's purge timer: it removes
	// the ended sagas and closed-order markers whose retention has passed.
	PurgeSagas struct{}
)

type sagaMessage interface{ sagaMessage() }

func (*ReserveForOrder) sagaMessage()        {}
func (*ReleaseForOrder) sagaMessage()        {}
func (*CommitForOrder) sagaMessage()         {}
func (*StockReserved) sagaMessage()          {}
func (*StockFailed) sagaMessage()            {}
func (*ProcessPaymentForOrder) sagaMessage() {}
func (*RefundForOrder) sagaMessage()         {}
func (*PaymentProcessed) sagaMessage()       {}
func (*PaymentFailed) sagaMessage()          {}
func (*SagaDeadline) sagaMessage()           {}
func (*PurgeSagas) sagaMessage()             {}
func (*VerifyCustomerForOrder) sagaMessage() {}
func (*CustomerVerified) sagaMessage()       {}
func (*ReleaseConfirmedOrder) sagaMessage()  {}

// codeItems codes an order's line items.
func codeItems(c *wire.Coder, p *[]LineItem) {
	n := c.Count(len(*p), 5)
	if c.Reading() {
		*p = nil
		if n > 0 {
			*p = make([]LineItem, n)
		}
	}
	for i := range *p {
		it := &(*p)[i]
		c.Str(&it.ProductID, &it.ProductName, &it.SKU)
		c.I64(&it.Quantity, &it.UnitPriceCents)
	}
}

// fields of each command, for both directions.
func (x *CreateCustomer) code(c *wire.Coder)    { c.Str(&x.ID, &x.Email, &x.Name, &x.Address, &x.Phone) }
func (x *UpdateCustomer) code(c *wire.Coder)    { c.Str(&x.ID, &x.Email, &x.Name, &x.Address, &x.Phone) }
func (x *SetCustomerStatus) code(c *wire.Coder) { c.Str(&x.ID, &x.Status, &x.Reason) }
func (x *ClaimSKU) code(c *wire.Coder)          { (*CreateProduct)(x).code(c) }
func (x *CreateProduct) code(c *wire.Coder) {
	c.Str(&x.ID, &x.SKU, &x.Name, &x.Description, &x.Category)
	c.I64(&x.PriceCents, &x.OnHand)
}
func (x *ReserveStock) code(c *wire.Coder) { c.Str(&x.ProductID, &x.OrderID); c.I64(&x.Quantity) }
func (x *ReleaseStock) code(c *wire.Coder) {
	c.Str(&x.ProductID, &x.OrderID)
	c.I64(&x.Quantity)
	c.Str(&x.Reason)
}
func (x *ReplenishStock) code(c *wire.Coder) {
	c.Str(&x.ProductID)
	c.I64(&x.Quantity)
	c.Str(&x.Reason)
}
func (x *CreateOrder) code(c *wire.Coder) {
	c.Str(&x.OrderID, &x.CustomerID)
	codeItems(c, &x.Items)
	c.Str(&x.ShippingAddress, &x.CustomerName, &x.CustomerEmail, &x.PaymentMethod)
	c.I64(&x.DeadlineNs, &x.RetentionNs)
}
func (x *ConfirmOrder) code(c *wire.Coder) { c.Str(&x.OrderID) }
func (x *CancelOrder) code(c *wire.Coder)  { c.Str(&x.OrderID, &x.Reason, &x.CancelledBy) }
func (x *CreatePayment) code(c *wire.Coder) {
	c.Str(&x.OrderID, &x.CustomerID)
	c.I64(&x.AmountCents)
	c.Str(&x.Currency, &x.Method)
}
func (x *RefundPayment) code(c *wire.Coder)   { c.Str(&x.PaymentID, &x.Reason) }
func (x *ReserveForOrder) code(c *wire.Coder) { c.Str(&x.OrderID, &x.ProductID); c.I64(&x.Quantity) }
func (x *ReleaseForOrder) code(c *wire.Coder) { c.Str(&x.OrderID, &x.ProductID, &x.Reason) }
func (x *CommitForOrder) code(c *wire.Coder)  { c.Str(&x.OrderID, &x.ProductID) }
func (x *StockReserved) code(c *wire.Coder)   { c.Str(&x.OrderID, &x.ProductID) }
func (x *StockFailed) code(c *wire.Coder)     { c.Str(&x.OrderID, &x.ProductID, &x.Reason) }
func (x *ProcessPaymentForOrder) code(c *wire.Coder) {
	c.Str(&x.OrderID, &x.CustomerID)
	c.I64(&x.AmountCents)
	c.Str(&x.Method)
}
func (x *RefundForOrder) code(c *wire.Coder)         { c.Str(&x.OrderID, &x.Reason); c.I64(&x.RetentionNs) }
func (x *PaymentProcessed) code(c *wire.Coder)       { c.Str(&x.OrderID, &x.PaymentID) }
func (x *PaymentFailed) code(c *wire.Coder)          { c.Str(&x.OrderID, &x.Reason) }
func (x *SagaDeadline) code(c *wire.Coder)           { c.Str(&x.OrderID) }
func (x *PurgeSagas) code(c *wire.Coder)             {}
func (x *VerifyCustomerForOrder) code(c *wire.Coder) { c.Str(&x.OrderID, &x.CustomerID) }
func (x *CustomerVerified) code(c *wire.Coder)       { c.Str(&x.OrderID, &x.CustomerID, &x.Reason) }
func (x *ReleaseConfirmedOrder) code(c *wire.Coder) {
	c.Str(&x.OrderID, &x.ProductID)
	c.I64(&x.Quantity)
	c.Str(&x.Reason)
}

type coded interface {
	engine.Command
	code(c *wire.Coder)
}

// encode is each AppendBinary: inlined there, its call of code is
// direct, and the writer stays on the stack.
func encode(b []byte, tag byte, x coded) ([]byte, error) {
	w := wire.Writer{B: append(b, tag)}
	x.code(&wire.Coder{W: &w})
	return w.B, nil
}

func (x *CreateCustomer) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagCreateCustomer, x)
}
func (x *UpdateCustomer) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagUpdateCustomer, x)
}
func (x *SetCustomerStatus) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagSetCustomerStatus, x)
}
func (x *CreateProduct) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagCreateProduct, x)
}
func (x *ReserveStock) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagReserveStock, x) }
func (x *ReleaseStock) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagReleaseStock, x) }
func (x *ReplenishStock) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagReplenishStock, x)
}
func (x *CreateOrder) AppendBinary(b []byte) ([]byte, error) {
	switch {
	case x.VerifyCustomer && x.ClosePayment:
		return encode(b, tagCreateOrderVerifyClose, x)
	case x.VerifyCustomer:
		return encode(b, tagCreateOrderVerify, x)
	case x.ClosePayment:
		return encode(b, tagCreateOrderClose, x)
	}
	return encode(b, tagCreateOrder, x)
}
func (x *ConfirmOrder) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagConfirmOrder, x) }
func (x *CancelOrder) AppendBinary(b []byte) ([]byte, error)  { return encode(b, tagCancelOrder, x) }
func (x *CreatePayment) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagCreatePayment, x)
}
func (x *RefundPayment) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagRefundPayment, x)
}
func (x *ReserveForOrder) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagReserveForOrder, x)
}
func (x *ReleaseForOrder) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagReleaseForOrder, x)
}
func (x *CommitForOrder) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagCommitForOrder, x)
}
func (x *StockReserved) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagStockReserved, x)
}
func (x *StockFailed) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagStockFailed, x) }
func (x *ProcessPaymentForOrder) AppendBinary(b []byte) ([]byte, error) {
	if x.Take {
		return encode(b, tagProcessPaymentTake, x)
	}
	return encode(b, tagProcessPaymentForOrder, x)
}
func (x *RefundForOrder) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagRefundForOrder, x)
}
func (x *PaymentProcessed) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagPaymentProcessed, x)
}
func (x *PaymentFailed) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagPaymentFailed, x)
}
func (x *SagaDeadline) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagSagaDeadline, x) }
func (x *PurgeSagas) AppendBinary(b []byte) ([]byte, error)   { return encode(b, tagPurgeSagas, x) }
func (x *ClaimSKU) AppendBinary(b []byte) ([]byte, error)     { return encode(b, tagClaimSKU, x) }
func (x *VerifyCustomerForOrder) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagVerifyCustomerForOrder, x)
}
func (x *CustomerVerified) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagCustomerVerified, x)
}
func (x *ReleaseConfirmedOrder) AppendBinary(b []byte) ([]byte, error) {
	return encode(b, tagReleaseConfirmedOrder, x)
}

func newCommand(tag byte) coded {
	switch tag {
	case tagCreateCustomer:
		return &CreateCustomer{}
	case tagUpdateCustomer:
		return &UpdateCustomer{}
	case tagSetCustomerStatus:
		return &SetCustomerStatus{}
	case tagCreateProduct:
		return &CreateProduct{}
	case tagReserveStock:
		return &ReserveStock{}
	case tagReleaseStock:
		return &ReleaseStock{}
	case tagReplenishStock:
		return &ReplenishStock{}
	case tagCreateOrder:
		return &CreateOrder{}
	case tagConfirmOrder:
		return &ConfirmOrder{}
	case tagCancelOrder:
		return &CancelOrder{}
	case tagCreatePayment:
		return &CreatePayment{}
	case tagRefundPayment:
		return &RefundPayment{}
	case tagReserveForOrder:
		return &ReserveForOrder{}
	case tagReleaseForOrder:
		return &ReleaseForOrder{}
	case tagCommitForOrder:
		return &CommitForOrder{}
	case tagStockReserved:
		return &StockReserved{}
	case tagStockFailed:
		return &StockFailed{}
	case tagProcessPaymentForOrder:
		return &ProcessPaymentForOrder{}
	case tagRefundForOrder:
		return &RefundForOrder{}
	case tagPaymentProcessed:
		return &PaymentProcessed{}
	case tagPaymentFailed:
		return &PaymentFailed{}
	case tagSagaDeadline:
		return &SagaDeadline{}
	case tagPurgeSagas:
		return &PurgeSagas{}
	case tagClaimSKU:
		return &ClaimSKU{}
	case tagSetFault:
		return &SetFault{}
	case tagReplayDLQ:
		return &ReplayDLQ{}
	case tagDiscardDLQ:
		return &DiscardDLQ{}
	case tagCreateOrderVerify:
		return &CreateOrder{VerifyCustomer: true}
	case tagVerifyCustomerForOrder:
		return &VerifyCustomerForOrder{}
	case tagCustomerVerified:
		return &CustomerVerified{}
	case tagReleaseConfirmedOrder:
		return &ReleaseConfirmedOrder{}
	case tagProcessPaymentTake:
		return &ProcessPaymentForOrder{Take: true}
	case tagCreateOrderClose:
		return &CreateOrder{ClosePayment: true}
	case tagCreateOrderVerifyClose:
		return &CreateOrder{VerifyCustomer: true, ClosePayment: true}
	}
	return nil
}

// Decode implements engine.Machine. Trailing bytes are an error: a
// record that decodes from a prefix of itself is not what was written.
func (m *Machine) Decode(data []byte) (engine.Command, error) { return Decode(data) }

// Decode is Machine.Decode, which needs no state.
func Decode(data []byte) (engine.Command, error) {
	cmd, err := wire.DecodeCommand(wire.SharedReader(string(data)), newCommand, coded.code)
	if err != nil {
		return nil, fmt.Errorf("commerce: %w", err)
	}
	return cmd, nil
}

// Snapshot encoding, version 5 (2 added the saga retention and the purge
// queue; 3 the sku index and event histories as eventLog encodes them; 4
// the dead-letter queue; 5 a saga's closePayment; 2 to 4 are still read). Every map is written in sorted key order, and the purge
// queue in queue order, so the same state always encodes to the same
// bytes.
const snapshotVersion = 5

// oldestSnapshotVersion is the oldest version Restore still reads.
const oldestSnapshotVersion = 2

func (x *Customer) code(c *wire.Coder) {
	c.Str(&x.ID, &x.Email, &x.Name, &x.Address, &x.Phone, &x.Status)
	c.I64(&x.CreatedAt, &x.UpdatedAt)
}

func (x *Product) code(c *wire.Coder) {
	c.Str(&x.ID, &x.SKU, &x.Name, &x.Description, &x.Category)
	c.I64(&x.PriceCents, &x.OnHand, &x.Reserved, &x.CreatedAt, &x.UpdatedAt)
	var ids []string
	if !c.Reading() {
		ids = sortedKeys(x.resv)
	}
	n := c.Count(len(ids), 3)
	if c.Reading() {
		x.resv = make(map[string]reservation, n)
		ids = make([]string, n)
	}
	for _, id := range ids {
		r := x.resv[id]
		c.Str(&id)
		c.I64(&r.qty)
		c.Bool(&r.saga)
		x.resv[id] = r
	}
}

func (x *Order) code(c *wire.Coder) {
	c.Str(&x.ID, &x.CustomerID)
	codeItems(c, &x.Items)
	c.I64(&x.Subtotal, &x.Tax, &x.Total)
	c.Str(&x.Status, &x.ShippingAddress, &x.CustomerName, &x.CustomerEmail, &x.PaymentMethod, &x.PaymentID, &x.Reason, &x.CancelledBy)
	c.I64(&x.CreatedAt, &x.UpdatedAt, &x.Deadline)
}

func (x *Saga) code(c *wire.Coder) {
	c.Str(&x.ID, &x.Type, &x.Status)
	n := c.Count(len(x.Steps), 3)
	if c.Reading() {
		x.Steps = make([]SagaStep, n)
	}
	for i := range x.Steps {
		st := &x.Steps[i]
		if !c.Reading() {
			c.W.Str(st.Name())
			c.W.Str(st.Status())
		} else {
			var ok1, ok2 bool
			st.name, ok1 = indexOf(sagaStepNames[:], c.R.Str())
			st.status, ok2 = indexOf(sagaStepStatuses[:], c.R.Str())
			if (!ok1 || !ok2) && c.R.Err == nil {
				c.R.Err = errors.New("commerce: a saga step of unknown name or status")
			}
		}
		c.I64(&st.At)
	}
	c.I64(&x.StartedAt, &x.UpdatedAt)
	n = c.Count(len(x.Products), 1)
	if c.Reading() {
		x.Products = make([]string, n)
	}
	c.Str(wire.Ptrs(x.Products)...)
	w := int64(x.waiting)
	c.I64(&w)
	x.waiting = int(w)
	c.Bool(&x.paymentAsked)
	c.Str(&x.FailureReason)
	c.I64(&x.RetentionNs)
	if !c.Reading() || c.Version >= 5 {
		c.Bool(&x.closePayment)
	}
}

func (x *Payment) code(c *wire.Coder) {
	c.Str(&x.ID, &x.OrderID, &x.CustomerID)
	c.I64(&x.AmountCents)
	c.Str(&x.Currency, &x.Method, &x.Status, &x.TransactionID, &x.FailureReason)
	c.Bool(&x.Saga)
	c.I64(&x.CreatedAt, &x.UpdatedAt)
}

func (x *Event) code(c *wire.Coder) {
	c.U64(&x.Seq)
	c.Str(&x.Type)
	c.I64(&x.At)
	n := c.Count(len(x.Fields), 2)
	if c.Reading() {
		x.Fields = nil
		if n > 0 {
			x.Fields = make([]Field, n)
		}
	}
	for i := range x.Fields {
		c.Str(&x.Fields[i].K, &x.Fields[i].V)
	}
}

// codeMap writes a map's entries in key order, or reads them back; an
// entity's key is inside it (id), so only the values are written.
func codeMap[V any](c *wire.Coder, m map[string]*V, key func(*V) string, minSize int) error {
	if !c.Reading() {
		ks := sortedKeys(m)
		c.Count(len(ks), minSize)
		for _, k := range ks {
			any(m[k]).(interface{ code(*wire.Coder) }).code(c)
		}
		return nil
	}
	for n := c.Count(0, minSize); n > 0 && c.R.Err == nil; n-- {
		v := new(V)
		any(v).(interface{ code(*wire.Coder) }).code(c)
		k := key(v)
		if _, dup := m[k]; dup && c.R.Err == nil {
			return fmt.Errorf("commerce: snapshot holds %q twice", k)
		}
		m[k] = v
	}
	return nil
}

// code writes the snapshot's sections in format order, or reads them
// back; a section the snapshot's version lacked is not read.
func (m *Machine) code(c *wire.Coder) error {
	for _, err := range []error{
		codeMap(c, m.customers, func(x *Customer) string { return x.ID }, 8),
		codeMap(c, m.products, func(x *Product) string { return x.ID }, 10),
		codeMap(c, m.orders, func(x *Order) string { return x.ID }, 20),
		codeMap(c, m.sagas, func(x *Saga) string { return x.ID }, 10),
		codeMap(c, m.payments, func(x *Payment) string { return x.OrderID }, 10),
	} {
		if err != nil {
			return err
		}
	}
	m.codeClosedOrders(c)
	if err := m.codeEvents(c); err != nil {
		return err
	}
	if err := m.codePurgeQueue(c); err != nil || (c.Reading() && c.Version < 3) {
		return err
	}
	m.codeSKUs(c)
	if c.Reading() && c.Version < 4 {
		return nil
	}
	return m.codeDLQ(c)
}

// codeClosedOrders writes the closed orders' ids in order, or reads them
// back.
func (m *Machine) codeClosedOrders(c *wire.Coder) {
	closed := sortedKeys(m.closedOrders)
	n := c.Count(len(closed), 1)
	if c.Reading() {
		closed = make([]string, n)
	}
	c.Str(wire.Ptrs(closed)...)
	for _, o := range closed {
		m.closedOrders[o] = true
	}
}

// codeEvents writes each entity's event log in key order, or reads them
// back. Version 2 held a log as a plain list of events.
func (m *Machine) codeEvents(c *wire.Coder) error {
	keys := sortedKeys(m.events)
	n := c.Count(len(keys), 2)
	if c.Reading() {
		keys = make([]string, n)
	}
	for _, k := range keys {
		c.Str(&k)
		l := m.events[k]
		if c.Reading() {
			l = &eventLog{}
		}
		if c.Reading() && c.Version == 2 {
			for hn := c.Count(0, 4); hn > 0 && c.R.Err == nil; hn-- {
				var e Event
				e.code(c)
				if c.R.Err == nil {
					if err := l.addDecoded(&e); err != nil {
						return err
					}
				}
			}
		} else if err := l.code(c); err != nil {
			return err
		}
		if c.Reading() && c.R.Err == nil {
			if _, dup := m.events[k]; dup {
				return fmt.Errorf("commerce: snapshot holds the events of %q twice", k)
			}
			m.events[k] = l
		}
	}
	return nil
}

// codeSKUs writes the SKU claims (SKU → product id) in SKU order, or
// reads them back.
func (m *Machine) codeSKUs(c *wire.Coder) {
	skus := sortedKeys(m.skus)
	n := c.Count(len(skus), 2)
	if c.Reading() {
		skus = make([]string, n)
	}
	for _, k := range skus {
		id := m.skus[k]
		c.Str(&k, &id)
		if c.Reading() && c.R.Err == nil {
			m.skus[k] = id
		}
	}
}

// codePurgeQueue writes the live part of the purge queue in queue order,
// or reads it back and checks that every entry names an ended saga or a
// marker of this partition: a queue that purged something else, or
// nothing, would not be the state that was written.
func (m *Machine) codePurgeQueue(c *wire.Coder) error {
	code := func(e *purgeEntry) {
		c.Str(&e.OrderID)
		c.I64(&e.At)
		c.Bool(&e.Marker)
	}
	n := c.Count(m.purgeQ.Len(), 3)
	if !c.Reading() {
		for e := range m.purgeQ.All() {
			code(&e)
		}
		return nil
	}
	var q retain.Queue[purgeEntry]
	for ; n > 0 && c.R.Err == nil; n-- {
		var e purgeEntry
		code(&e)
		q.Push(e)
	}
	if c.R.Err != nil {
		return nil
	}
	// Times are not checked to rise: a lowered retention queues earlier
	// times behind later ones.
	for e := range q.All() {
		if e.Marker && !m.closedOrders[e.OrderID] {
			return fmt.Errorf("commerce: snapshot purge queue names closed order %q, which is not closed", e.OrderID)
		}
		if s := m.sagas[e.OrderID]; !e.Marker && (s == nil || !s.Terminal()) {
			return fmt.Errorf("commerce: snapshot purge queue names saga %q, which has not ended", e.OrderID)
		}
	}
	m.purgeQ = q
	return nil
}

// AppendSnapshot implements engine.Machine.
func (m *Machine) AppendSnapshot(dst []byte) []byte {
	w := wire.Writer{B: dst}
	w.U32(snapshotVersion)
	_ = m.code(&wire.Coder{W: &w}) // writing cannot fail
	return w.B
}

// ForkSnapshot implements engine.SnapshotForker. Encoding a partition of
// a long run (tens of thousands of orders and their histories) took over a
// second, all of it with the partition serving nothing; copying the
// entities takes milliseconds, and the encoding then runs on the snapshot
// writer. The copies may share what the partition never changes in place:
// strings, line items, and the saga's steps and products and the event
// logs' buffers, which only ever grow past the length the copy holds.
func (m *Machine) ForkSnapshot() func(dst []byte) []byte {
	f := &Machine{
		customers:    forkMap(m.customers, nil),
		products:     forkMap(m.products, func(p *Product) { p.resv = maps.Clone(p.resv) }),
		orders:       forkMap(m.orders, nil),
		sagas:        forkMap(m.sagas, nil),
		payments:     forkMap(m.payments, nil),
		closedOrders: maps.Clone(m.closedOrders),
		events:       forkMap(m.events, nil),
		purgeQ:       m.purgeQ.View(),
		skus:         maps.Clone(m.skus),
		dlq:          m.dlq.fork(),
	}
	return f.AppendSnapshot
}

// forkMap copies a map of entities: one allocation for all the copies.
func forkMap[V any](m map[string]*V, fix func(*V)) map[string]*V {
	out := make(map[string]*V, len(m))
	vals := make([]V, len(m))
	i := 0
	for k, v := range m {
		vals[i] = *v
		if fix != nil {
			fix(&vals[i])
		}
		out[k] = &vals[i]
		i++
	}
	return out
}

// Restore implements engine.Machine.
func (m *Machine) Restore(data []byte) error {
	defer m.keepPartition(m.dlq.part)
	*m = *NewMachine()
	r := wire.Reader{B: data}
	v := r.U32()
	if r.Err == nil && (v < oldestSnapshotVersion || v > snapshotVersion) {
		return fmt.Errorf("commerce: snapshot version %d; this binary reads versions %d to %d", v, oldestSnapshotVersion, snapshotVersion)
	}
	if err := m.code(&wire.Coder{R: &r, Version: uint64(v)}); err != nil {
		*m = *NewMachine()
		return err
	}
	if r.Err == nil && len(r.B) > 0 {
		r.Err = fmt.Errorf("%d bytes after the state", len(r.B))
	}
	if r.Err != nil {
		*m = *NewMachine()
		return fmt.Errorf("commerce: restoring snapshot: %w", r.Err)
	}
	return nil
}

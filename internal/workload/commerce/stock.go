package commerce

import (
	"fmt"

	"github.com/surge-run/surge/internal/engine"
)

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

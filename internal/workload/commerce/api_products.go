package commerce

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// --- products and stock ---

func (a *API) createProduct(w http.ResponseWriter, r *http.Request) int {
	var b struct {
		SKU            string          `json:"sku"`
		Name           string          `json:"name"`
		Description    string          `json:"description"`
		Price          json.RawMessage `json:"price"`
		QuantityOnHand int64           `json:"quantityOnHand"`
		Category       string          `json:"category"`
	}
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	price, set, msg := moneyField("price", b.Price)
	if msg != "" {
		return api.Error(w, http.StatusBadRequest, msg)
	}
	if !set {
		return api.Error(w, http.StatusBadRequest, "price is required (at least 0.01)")
	}
	id := newID()
	claim := &ClaimSKU{ID: id, SKU: b.SKU, Name: b.Name, Description: b.Description,
		Category: b.Category, PriceCents: price, OnHand: b.QuantityOnHand}
	res, err := engine.Do[*Result](r.Context(), a.eng, a.eng.PartitionOf(SKUKey(b.SKU)), WorkloadID, claim)
	if err != nil {
		return engineError(w, err)
	}
	if res.Outcome == Conflict {
		return a.createSameSKU(w, r, (*CreateProduct)(claim))
	} else if st := refused(w, res); st != 0 {
		return st
	}
	// The claim is durable and its CreateProduct on its way, which the
	// engine delivers even across a crash. Answering only once the product
	// reads back keeps a client's next request (an order naming it) from
	// finding no such product.
	// Mail is never shed, so the bound only catches a CreateProduct the
	// product's partition refused (an id collision), which would hang.
	giveUp := time.Now().Add(30 * time.Second)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 20*time.Millisecond) {
		p, err := query[*Product](r.Context(), a, ProductKey(id), &GetProduct{ID: id})
		if err != nil {
			return engineError(w, err)
		}
		if p != nil {
			return writeJSON(w, http.StatusCreated, productOut(p))
		}
		if time.Now().After(giveUp) {
			return api.Error(w, http.StatusInternalServerError, "sku "+api.Quote(b.SKU)+" was claimed for product "+api.Quote(id)+", which was not created")
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return 499 // the client went away; the product is still made
		case <-a.done:
			return api.Error(w, http.StatusServiceUnavailable, "shutting down; product "+api.Quote(id)+" is being created")
		}
	}
}

// createSameSKU makes a product whose sku another product has, as the
// peer does (it has no sku check): a data loader run twice gets a second
// set of products and ids, not refusals that would leave it with none.
// The sku's claim was refused, so the sku index keeps naming the first
// product; this one is created directly in its own partition, where its
// fields were checked already by the claim.
func (a *API) createSameSKU(w http.ResponseWriter, r *http.Request, c *CreateProduct) int {
	res, st := a.do(r.Context(), w, ProductKey(c.ID), c)
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusCreated, productOut(res.Product))
}

func (a *API) getProduct(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "product", id)
	}
	p, err := query[*Product](r.Context(), a, ProductKey(id), &GetProduct{ID: id})
	if err != nil {
		return engineError(w, err)
	}
	if p == nil {
		return notFound(w, "product", id)
	}
	return writeJSON(w, http.StatusOK, productOut(p))
}

func (a *API) listProducts(w http.ResponseWriter, r *http.Request) int {
	limit, st := parseLimit(w, r, 100)
	if st != 0 {
		return st
	}
	parts, err := fanout[[]Product](r.Context(), a, &ListProducts{Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	var all []Product
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(x, y Product) int { return strings.Compare(x.ID, y.ID) })
	out := make([]productDTO, 0, min(limit, len(all)))
	for i := range all[:min(limit, len(all))] {
		out = append(out, productOut(&all[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

type stockBody struct {
	Quantity int64  `json:"quantity"`
	OrderID  string `json:"orderId"`
	Reason   string `json:"reason"`
}

func (a *API) stock(w http.ResponseWriter, r *http.Request, cmd func(id string, b *stockBody) (string, engine.Command)) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "product", id)
	}
	var b stockBody
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	problem, c := cmd(id, &b)
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	res, st := a.do(r.Context(), w, ProductKey(id), c)
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, productOut(res.Product))
}

func (a *API) reserveStock(w http.ResponseWriter, r *http.Request) int {
	return a.stock(w, r, func(id string, b *stockBody) (string, engine.Command) {
		if b.OrderID == "" {
			return "orderId is required", nil
		}
		return "", &ReserveStock{ProductID: id, OrderID: b.OrderID, Quantity: b.Quantity}
	})
}

func (a *API) releaseStock(w http.ResponseWriter, r *http.Request) int {
	return a.stock(w, r, func(id string, b *stockBody) (string, engine.Command) {
		if b.OrderID == "" {
			return "orderId is required", nil
		}
		return "", &ReleaseStock{ProductID: id, OrderID: b.OrderID, Quantity: b.Quantity, Reason: b.Reason}
	})
}

func (a *API) replenishStock(w http.ResponseWriter, r *http.Request) int {
	return a.stock(w, r, func(id string, b *stockBody) (string, engine.Command) {
		return "", &ReplenishStock{ProductID: id, Quantity: b.Quantity, Reason: b.Reason}
	})
}

// --- payments ---

func (a *API) createPayment(w http.ResponseWriter, r *http.Request) int {
	var b struct {
		OrderID    string          `json:"orderId"`
		CustomerID string          `json:"customerId"`
		Amount     json.RawMessage `json:"amount"`
		Currency   string          `json:"currency"`
		Method     string          `json:"method"`
	}
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	amount, set, msg := moneyField("amount", b.Amount)
	switch {
	case msg != "":
		return api.Error(w, http.StatusBadRequest, msg)
	case !set:
		return api.Error(w, http.StatusBadRequest, "amount is required (at least 0.01)")
	case b.OrderID == "":
		return api.Error(w, http.StatusBadRequest, "orderId is required")
	}
	res, st := a.do(r.Context(), w, PaymentKey(b.OrderID), &CreatePayment{OrderID: b.OrderID, CustomerID: b.CustomerID,
		AmountCents: amount, Currency: b.Currency, Method: b.Method})
	if st != 0 {
		return st
	}
	// A declined payment is still made: 201 with status FAILED.
	return writeJSON(w, http.StatusCreated, paymentOut(res.Payment))
}

func (a *API) getPayment(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	orderID, ok2 := OrderOfPaymentID(id)
	if !ok || !ok2 {
		return notFound(w, "payment", id)
	}
	p, err := query[*Payment](r.Context(), a, PaymentKey(orderID), &GetPayment{ID: id})
	if err != nil {
		return engineError(w, err)
	}
	if p == nil {
		return notFound(w, "payment", id)
	}
	return writeJSON(w, http.StatusOK, paymentOut(p))
}

func (a *API) paymentByOrder(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "orderId")
	if !ok {
		return notFound(w, "payment of order", id)
	}
	p, err := query[*Payment](r.Context(), a, PaymentKey(id), &PaymentByOrder{OrderID: id})
	if err != nil {
		return engineError(w, err)
	}
	if p == nil {
		return notFound(w, "payment of order", id)
	}
	return writeJSON(w, http.StatusOK, paymentOut(p))
}

func (a *API) refundPayment(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	orderID, ok2 := OrderOfPaymentID(id)
	if !ok || !ok2 {
		return notFound(w, "payment", id)
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	res, st := a.do(r.Context(), w, PaymentKey(orderID), &RefundPayment{PaymentID: id, Reason: b.Reason})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, paymentOut(res.Payment))
}

package commerce

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

// Limits of the HTTP API.
const (
	maxBody      = 64 << 10
	maxOrderBody = 512 << 10
	// MaxListLimit bounds ?limit= of every list and event route.
	MaxListLimit = 1000
	// MaxWait bounds the long poll's ?wait=.
	MaxWait = 60 * time.Second
	// DefaultMaxWaiters bounds the long polls and streams open at once.
	DefaultMaxWaiters = 10_000
	// DefaultPaymentMethod pays a saga whose order names no method.
	DefaultPaymentMethod = "CREDIT_CARD"
	// streamPing is how often an idle stream re-reads the order and sends
	// a comment, so proxies keep it open and a missed note costs little.
	streamPing = 15 * time.Second
)

// API serves the commerce routes (docs/API.md) over an
// engine that runs Workload.
type API struct {
	eng       *engine.Engine
	hub       *Hub
	deadline  time.Duration
	retention time.Duration
	done      chan struct{}
	stopOnce  sync.Once
	// lists holds a turn per large list page being built (heavy).
	lists *api.Turns
}

// DefaultSagaRetention is how long an ended saga stays readable (GET
// /api/sagas/{id}) before it is purged.
const DefaultSagaRetention = 15 * time.Minute

// NewAPI returns the commerce API over eng. hub receives the engine's
// notes (see Hub.Notify); the saga deadline is DefaultDeadline and the
// saga retention DefaultSagaRetention.
func NewAPI(eng *engine.Engine, hub *Hub) *API {
	return &API{eng: eng, hub: hub, deadline: time.Duration(DefaultDeadline), retention: DefaultSagaRetention, done: make(chan struct{}),
		lists: api.NewLargeAnswerTurns()}
}

// SetSagaRetention sets how long sagas started from now on are kept once
// they have ended; 0 keeps them for ever. Each CreateOrder logs the
// retention it was made with, so replay purges what the live run purged
// whatever the setting is then.
func (a *API) SetSagaRetention(d time.Duration) *API {
	a.retention = max(d, 0)
	return a
}

// SetSagaDeadline sets the deadline of sagas started from now on; it is
// logged in each CreateOrder, so replay arms the same timers.
func (a *API) SetSagaDeadline(d time.Duration) *API {
	if d > 0 {
		a.deadline = d
	}
	return a
}

// Shutdown ends every long poll and stream at once (each answers with the
// order as it is), so a graceful shutdown does not wait for them.
func (a *API) Shutdown() { a.stopOnce.Do(func() { close(a.done) }) }

// Register adds the routes to mux; their errors have the peer's shape.
func (a *API) Register(mux *http.ServeMux, metrics *api.Metrics) {
	m := routes{metrics}
	m.Handle(mux, "POST /api/customers", a.createCustomer)
	m.Handle(mux, "GET /api/customers", a.heavy(a.listCustomers))
	m.Handle(mux, "GET /api/customers/{id}", a.getCustomer)
	m.Handle(mux, "PUT /api/customers/{id}", a.updateCustomer)
	m.Handle(mux, "PATCH /api/customers/{id}/status", a.setCustomerStatus)
	m.Handle(mux, "GET /api/customers/{id}/events", a.entityEvents("customer", CustomerKey))

	m.Handle(mux, "POST /api/products", a.createProduct)
	m.Handle(mux, "GET /api/products", a.heavy(a.listProducts))
	m.Handle(mux, "GET /api/products/{id}", a.getProduct)
	m.Handle(mux, "GET /api/products/{id}/events", a.entityEvents("product", ProductKey))
	m.Handle(mux, "POST /api/products/{id}/stock/reserve", a.reserveStock)
	m.Handle(mux, "POST /api/products/{id}/stock/release", a.releaseStock)
	m.Handle(mux, "POST /api/products/{id}/stock/replenish", a.replenishStock)

	m.Handle(mux, "POST /api/orders", a.createOrder)
	m.Handle(mux, "GET /api/orders", a.heavy(a.listOrders))
	m.Handle(mux, "GET /api/orders/{id}", a.getOrder)
	// One pattern for customer/{customerId}, {id}/events and {id}/stream:
	// as separate patterns they would overlap (/api/orders/customer/events).
	m.Handle(mux, "GET /api/orders/{id}/{sub}", a.orderSub)
	m.Handle(mux, "PATCH /api/orders/{id}/confirm", a.confirmOrder)
	m.Handle(mux, "PATCH /api/orders/{id}/cancel", a.cancelOrder)

	m.Handle(mux, "GET /api/sagas", a.heavy(a.listSagas))
	m.Handle(mux, "GET /api/sagas/{id}", a.getSaga)

	m.Handle(mux, "POST /api/payments", a.createPayment)
	m.Handle(mux, "GET /api/payments/{id}", a.getPayment)
	m.Handle(mux, "GET /api/payments/order/{orderId}", a.paymentByOrder)
	m.Handle(mux, "POST /api/payments/{id}/refund", a.refundPayment)

	// Spring matches a collection route with a trailing slash too, so the
	// peer's clients may send one. {$} matches only the bare slash: an
	// empty id never reaches an item handler.
	m.Handle(mux, "POST /api/customers/{$}", a.createCustomer)
	m.Handle(mux, "GET /api/customers/{$}", a.heavy(a.listCustomers))
	m.Handle(mux, "POST /api/products/{$}", a.createProduct)
	m.Handle(mux, "GET /api/products/{$}", a.heavy(a.listProducts))
	m.Handle(mux, "POST /api/orders/{$}", a.createOrder)
	m.Handle(mux, "GET /api/orders/{$}", a.heavy(a.listOrders))
	m.Handle(mux, "GET /api/sagas/{$}", a.heavy(a.listSagas))
	m.Handle(mux, "POST /api/payments/{$}", a.createPayment)
	a.registerAdmin(mux, m)
	a.registerOps(mux, m)
	m.HandleFallback(mux)
}

// --- plumbing ---

// heavyListLimit: a list page of more than this many items is heavy.
const heavyListLimit = 100

// heavy lets as many large list pages (?limit= over heavyListLimit) be
// built and written at once as the server has cores; the others wait
// their turn (api.Turns.Serve: on the lean servers without their
// in-flight slot) for at most api.LargeAnswerPatience. Each gathers up to
// 1,000 entities from every partition and renders them whole (1,000
// orders are about 700 KB): a field test's 1,024 at once took the server
// to 3.5 GB, and to 5.8 GB when their clients did not read, while every
// other request waited for the CPU.
func (a *API) heavy(h api.HandlerFunc) api.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) int {
		if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err != nil || n <= heavyListLimit {
			return h(w, r)
		}
		return a.lists.Serve(w, r, h, "too many large list pages (limit over 100) are being built or sent (pages of at most 100 do not wait)")
	}
}

// do applies cmd at key's partition. If the engine failed or the machine
// refused the command, it has answered and returns that status.
func (a *API) do(ctx context.Context, w http.ResponseWriter, key string, cmd engine.Command) (*Result, int) {
	res, err := engine.Do[*Result](ctx, a.eng, a.eng.PartitionOf(key), WorkloadID, cmd)
	if err != nil {
		return nil, engineError(w, err)
	}
	return res, refused(w, res)
}

// query asks q at key's partition; the answer is an R.
func query[R any](ctx context.Context, a *API, key string, q any) (R, error) {
	return engine.Query[R](ctx, a.eng, a.eng.PartitionOf(key), WorkloadID, q)
}

// fanout asks every partition q and returns the answers, each an R, in
// partition order.
func fanout[R any](ctx context.Context, a *API, q any) ([]R, error) {
	return engine.QueryAll[R](ctx, a.eng, WorkloadID, q)
}

// engineError maps engine failures to statuses a client can act on.
func engineError(w http.ResponseWriter, err error) int {
	return api.EngineError(w, err, "server is busy: nothing was done, retry after the Retry-After pause")
}

// refused answers a Result that is not a success, or returns 0.
func refused(w http.ResponseWriter, res *Result) int {
	switch res.Outcome {
	case OK, Created, Same:
		return 0
	case NotFound:
		return api.Error(w, http.StatusNotFound, res.Msg)
	case Invalid:
		return api.Error(w, http.StatusBadRequest, res.Msg)
	case Conflict:
		return api.Error(w, http.StatusConflict, res.Msg)
	case Unprocessable:
		return api.Error(w, http.StatusUnprocessableEntity, res.Msg)
	}
	return api.Error(w, http.StatusInternalServerError, "unexpected outcome: "+res.Msg)
}

// readJSON reads a size-limited JSON body into v; it returns the status it
// answered, or 0.
var readJSON = api.ReadJSON

func writeJSON(w http.ResponseWriter, status int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return api.Error(w, http.StatusInternalServerError, err.Error())
	}
	api.Write(w, status, true, append(b, '\n'))
	return status
}

// pathID reads an id from the path: one that could never have been
// issued (too long, not printable text) is simply not found.
func pathID(r *http.Request, name string) (string, bool) {
	id := r.PathValue(name)
	return id, id != "" && len(id) <= MaxTextLen && api.CheckText(id) == ""
}

func notFound(w http.ResponseWriter, what, id string) int {
	return api.Error(w, http.StatusNotFound, what+" "+api.Quote(id)+" not found")
}

// parseLimit reads ?limit= (def if absent; at most MaxListLimit).
func parseLimit(w http.ResponseWriter, r *http.Request, def int) (int, int) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, api.Error(w, http.StatusBadRequest, "limit must be a whole number from 1 to "+strconv.Itoa(MaxListLimit)+", got "+api.Quote(s))
	}
	return min(n, MaxListLimit), 0
}

// moneyField reads an amount sent as a JSON number or a numeric string;
// set is false if it is absent or null.
func moneyField(name string, raw json.RawMessage) (cents int64, set bool, problem string) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, ""
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false, name + " is not a valid string"
		}
	}
	c, err := ParseMoney(s)
	if err != nil {
		var ok bool
		if c, ok = floatArtifactCents(s); !ok {
			return 0, false, fmt.Sprintf("%s: %v, got %s", name, err, api.Quote(s))
		}
	}
	return c, true, ""
}

// floatArtifactCents accepts an amount a client computed in binary floating
// point and printed in full, such as 19.990000000000002 or 1e3: exactly
// (no float arithmetic here) it is within a millionth of a cent of a whole
// number of cents, so it means that amount. A real third decimal (10.005)
// is still refused, never rounded.
func floatArtifactCents(s string) (int64, bool) {
	if len(s) > 64 || strings.ContainsFunc(s, func(r rune) bool {
		return (r < '0' || r > '9') && r != '.' && r != 'e' && r != 'E' && r != '+' && r != '-'
	}) || strings.HasPrefix(s, "-") {
		return 0, false
	}
	// big.Rat would expand 1e999999999 in full: only exponents of at most
	// two digits are amounts anyone means.
	if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-")) > 2 {
		return 0, false
	}
	var r big.Rat
	if _, ok := r.SetString(s); !ok {
		return 0, false
	}
	r.Mul(&r, big.NewRat(100, 1))
	// Nearest whole number of cents, and how far the amount is from it.
	half := new(big.Rat).Add(&r, big.NewRat(1, 2))
	n := new(big.Int).Quo(half.Num(), half.Denom())
	diff := new(big.Rat).Sub(&r, new(big.Rat).SetInt(n))
	if diff.Abs(diff).Cmp(big.NewRat(1, 1_000_000)) > 0 || !n.IsInt64() || n.Int64() > MaxMoneyCents {
		return 0, false
	}
	return n.Int64(), true
}

// newID returns a random version-4 UUID. Ids embed nothing: entities are
// found by the hash of their key.
func newID() string { return ids.New().String() }

// --- wire forms ---

// Money is cents on the wire as a JSON number with two decimals.
type Money int64

func (m Money) MarshalJSON() ([]byte, error) { return []byte(FormatMoney(int64(m))), nil }

func stamp(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z")
}

type customerDTO struct {
	CustomerID string `json:"customerId"`
	Email      string `json:"email"`
	Name       string `json:"name"`
	Address    optStr `json:"address"`
	Phone      optStr `json:"phone"`
	Status     string `json:"status"`
	CreatedAt  string `json:"createdAt"`
	UpdatedAt  string `json:"updatedAt"`
}

func customerOut(c *Customer) customerDTO {
	return customerDTO{c.ID, c.Email, c.Name, optStr(c.Address), optStr(c.Phone), c.Status, stamp(c.CreatedAt), stamp(c.UpdatedAt)}
}

type productDTO struct {
	ProductID         string `json:"productId"`
	SKU               string `json:"sku"`
	Name              string `json:"name"`
	Description       optStr `json:"description"`
	Price             Money  `json:"price"`
	QuantityOnHand    int64  `json:"quantityOnHand"`
	QuantityReserved  int64  `json:"quantityReserved"`
	AvailableQuantity int64  `json:"availableQuantity"`
	Category          optStr `json:"category"`
	Status            string `json:"status"`
	CreatedAt         string `json:"createdAt"`
	UpdatedAt         string `json:"updatedAt"`
}

func productOut(p *Product) productDTO {
	return productDTO{p.ID, p.SKU, p.Name, optStr(p.Description), Money(p.PriceCents), p.OnHand, p.Reserved, p.Available(),
		optStr(p.Category), p.Status(), stamp(p.CreatedAt), stamp(p.UpdatedAt)}
}

type lineItemDTO struct {
	ProductID   string `json:"productId"`
	ProductName optStr `json:"productName"`
	SKU         optStr `json:"sku"`
	Quantity    int64  `json:"quantity"`
	UnitPrice   Money  `json:"unitPrice"`
	LineTotal   Money  `json:"lineTotal"`
}

type orderDTO struct {
	OrderID            string        `json:"orderId"`
	CustomerID         string        `json:"customerId"`
	LineItems          []lineItemDTO `json:"lineItems"`
	Subtotal           Money         `json:"subtotal"`
	Tax                exactMoney    `json:"tax"`
	Total              exactMoney    `json:"total"`
	PaymentAmount      Money         `json:"paymentAmount"`
	Status             string        `json:"status"`
	ShippingAddress    optStr        `json:"shippingAddress"`
	CustomerName       optStr        `json:"customerName"`
	CustomerEmail      optStr        `json:"customerEmail"`
	PaymentMethod      string        `json:"paymentMethod"`
	PaymentID          string        `json:"paymentId,omitempty"`
	SagaID             string        `json:"sagaId"`
	CancellationReason string        `json:"cancellationReason,omitempty"`
	CancelledBy        string        `json:"cancelledBy,omitempty"`
	CreatedAt          string        `json:"createdAt"`
	UpdatedAt          string        `json:"updatedAt"`
}

func orderOut(o *Order) orderDTO {
	d := orderDTO{OrderID: o.ID, CustomerID: o.CustomerID, LineItems: make([]lineItemDTO, len(o.Items)),
		Subtotal: Money(o.Subtotal), Tax: exactTax(o.Subtotal), Total: exactTotal(o.Subtotal), PaymentAmount: Money(o.Total), Status: o.Status,
		ShippingAddress: optStr(o.ShippingAddress), CustomerName: optStr(o.CustomerName), CustomerEmail: optStr(o.CustomerEmail),
		PaymentMethod: o.PaymentMethod, PaymentID: o.PaymentID, SagaID: o.ID, CancelledBy: o.CancelledBy,
		CreatedAt: stamp(o.CreatedAt), UpdatedAt: stamp(o.UpdatedAt)}
	if o.Status == OrderCancelled {
		d.CancellationReason = o.Reason
	}
	for i, it := range o.Items {
		d.LineItems[i] = lineItemDTO{it.ProductID, optStr(it.ProductName), optStr(it.SKU), it.Quantity, Money(it.UnitPriceCents), Money(it.Quantity * it.UnitPriceCents)}
	}
	return d
}

type sagaStepDTO struct {
	StepName  string `json:"stepName"`
	Status    string `json:"status"`
	Timestamp string `json:"timestamp"`
}

type sagaDTO struct {
	SagaID        string        `json:"sagaId"`
	SagaType      string        `json:"sagaType"`
	OrderID       string        `json:"orderId"`
	Status        string        `json:"status"`
	Steps         []sagaStepDTO `json:"steps"`
	FailureReason string        `json:"failureReason,omitempty"`
	StartedAt     string        `json:"startedAt"`
	UpdatedAt     string        `json:"updatedAt"`
}

func sagaOut(s *Saga) sagaDTO {
	d := sagaDTO{SagaID: s.ID, SagaType: s.Type, OrderID: s.ID, Status: s.Status, Steps: make([]sagaStepDTO, len(s.Steps)),
		FailureReason: s.FailureReason, StartedAt: stamp(s.StartedAt), UpdatedAt: stamp(s.UpdatedAt)}
	for i, st := range s.Steps {
		d.Steps[i] = sagaStepDTO{st.Name(), st.Status(), stamp(st.At)}
	}
	return d
}

type paymentDTO struct {
	PaymentID     string `json:"paymentId"`
	OrderID       string `json:"orderId"`
	CustomerID    string `json:"customerId"`
	Amount        Money  `json:"amount"`
	Currency      string `json:"currency"`
	Method        optStr `json:"method"`
	Status        string `json:"status"`
	TransactionID optStr `json:"transactionId"`
	FailureReason optStr `json:"failureReason"`
	CreatedAt     string `json:"createdAt"`
	UpdatedAt     string `json:"updatedAt"`
}

func paymentOut(p *Payment) paymentDTO {
	return paymentDTO{p.ID, p.OrderID, p.CustomerID, Money(p.AmountCents), p.Currency, optStr(p.Method), p.Status,
		optStr(p.TransactionID), optStr(p.FailureReason), stamp(p.CreatedAt), stamp(p.UpdatedAt)}
}

type eventDTO struct {
	Sequence    uint64            `json:"sequence"`
	EventType   string            `json:"eventType"`
	AggregateID string            `json:"aggregateId"`
	Timestamp   string            `json:"timestamp"`
	Data        map[string]string `json:"data"`
}

// entityEvents serves GET /api/<kind>s/{id}/events?limit=20: the newest
// events, oldest first. Every entity has its creation event, so no events
// means no such entity.
func (a *API) entityEvents(what string, key func(string) string) api.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) int {
		id, ok := pathID(r, "id")
		if !ok {
			return notFound(w, what, id)
		}
		return a.events(w, r, what, id, key(id))
	}
}

func (a *API) events(w http.ResponseWriter, r *http.Request, what, id, key string) int {
	limit, st := parseLimit(w, r, 20)
	if st != 0 {
		return st
	}
	evs, err := query[[]Event](r.Context(), a, key, &Events{Key: key, Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	if len(evs) == 0 {
		return notFound(w, what, id)
	}
	out := make([]eventDTO, len(evs))
	for i, e := range evs {
		d := eventDTO{Sequence: e.Seq, EventType: e.Type, AggregateID: id, Timestamp: stamp(e.At), Data: make(map[string]string, len(e.Fields))}
		for _, f := range e.Fields {
			d.Data[f.K] = f.V
		}
		out[i] = d
	}
	return writeJSON(w, http.StatusOK, out)
}

// --- customers ---

type customerBody struct {
	Email   string `json:"email"`
	Name    string `json:"name"`
	Address string `json:"address"`
	Phone   string `json:"phone"`
}

func (a *API) createCustomer(w http.ResponseWriter, r *http.Request) int {
	var b customerBody
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	id := newID()
	res, st := a.do(r.Context(), w, CustomerKey(id), &CreateCustomer{ID: id, Email: b.Email, Name: b.Name, Address: b.Address, Phone: b.Phone})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusCreated, customerOut(res.Customer))
}

func (a *API) getCustomer(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "customer", id)
	}
	c, err := query[*Customer](r.Context(), a, CustomerKey(id), &GetCustomer{ID: id})
	if err != nil {
		return engineError(w, err)
	}
	if c == nil {
		return notFound(w, "customer", id)
	}
	return writeJSON(w, http.StatusOK, customerOut(c))
}

// updateCustomer replaces the customer's details (PUT: absent address or
// phone become empty); the status changes only by PATCH .../status.
func (a *API) updateCustomer(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "customer", id)
	}
	var b customerBody
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	res, st := a.do(r.Context(), w, CustomerKey(id), &UpdateCustomer{ID: id, Email: b.Email, Name: b.Name, Address: b.Address, Phone: b.Phone})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, customerOut(res.Customer))
}

func (a *API) setCustomerStatus(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "customer", id)
	}
	var b struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	res, st := a.do(r.Context(), w, CustomerKey(id), &SetCustomerStatus{ID: id, Status: b.Status, Reason: b.Reason})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, customerOut(res.Customer))
}

func (a *API) listCustomers(w http.ResponseWriter, r *http.Request) int {
	limit, st := parseLimit(w, r, 10)
	if st != 0 {
		return st
	}
	parts, err := fanout[[]Customer](r.Context(), a, &ListCustomers{Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	var all []Customer
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(x, y Customer) int { return strings.Compare(x.ID, y.ID) })
	out := make([]customerDTO, 0, min(limit, len(all)))
	for i := range all[:min(limit, len(all))] {
		out = append(out, customerOut(&all[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

package commerce

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/waiters"
)

// Hub holds the long polls and streams waiting for orders to end, by
// order id, fed by the engine's notes (engine.Options.Notify →
// Hub.Notify). The registry (package waiters) caps them at --max-waiters.
type Hub struct {
	waiters *waiters.Registry[string, OrderChanged]
}

type waiter = waiters.Waiter[OrderChanged]

// NewHub returns a hub for at most max waiters at once (0: the default).
func NewHub(max int) *Hub {
	if max <= 0 {
		max = DefaultMaxWaiters
	}
	return &Hub{waiters: waiters.New[string, OrderChanged](max)}
}

// Notify takes a note of the commerce workload; it never blocks (it runs
// on the log's completion goroutine).
func (h *Hub) Notify(v any) {
	if oc, ok := v.(OrderChanged); ok {
		h.waiters.Wake(oc.OrderID, oc)
	}
}

// Waiting is how many waiters are registered.
func (h *Hub) Waiting() int { return h.waiters.Waiting() }

// refused words a stream's refusal at the cap: 503 with a Retry-After
// that gives it its own turn for a freed place (api.SlotRetry).
func (h *Hub) refused(w http.ResponseWriter) int {
	api.SetRetryAfter(w, h.waiters.RefusedWait())
	return api.Error(w, http.StatusServiceUnavailable, "too many clients are waiting for orders (--max-waiters "+strconv.Itoa(h.waiters.Max())+
		"); poll instead, or come back after the Retry-After pause")
}

func terminalOrder(status string) bool { return status == OrderConfirmed || status == OrderCancelled }

// --- orders ---

type orderBody struct {
	CustomerID      string         `json:"customerId"`
	LineItems       []lineItemBody `json:"lineItems"`
	ShippingAddress string         `json:"shippingAddress"`
	CustomerName    string         `json:"customerName"`
	CustomerEmail   string         `json:"customerEmail"`
	PaymentMethod   string         `json:"paymentMethod"`
}

type lineItemBody struct {
	ProductID   string          `json:"productId"`
	Quantity    int64           `json:"quantity"`
	UnitPrice   json.RawMessage `json:"unitPrice"`
	ProductName string          `json:"productName"`
	SKU         string          `json:"sku"`
}

func (a *API) createOrder(w http.ResponseWriter, r *http.Request) int {
	var b orderBody
	if st := readJSON(w, r, maxOrderBody, &b); st != 0 {
		return st
	}
	cmd, msg := a.orderCommand(&b)
	if msg != "" {
		return api.Error(w, http.StatusBadRequest, msg)
	}
	ctx := r.Context()
	cu, products, err := a.lookUpOrder(ctx, b.CustomerID, cmd.Items)
	if err != nil {
		return engineError(w, err)
	}
	// An unknown customer or product does not refuse the order, as with the
	// peer: it is created, and its saga cancels it (see unknownInOrder).
	if cu == nil {
		cmd.VerifyCustomer = true
	} else if cu.Status != CustomerActive {
		return api.Error(w, http.StatusUnprocessableEntity, "customer "+api.Quote(b.CustomerID)+" is "+cu.Status+"; only an ACTIVE customer can order")
	}
	fillFromCatalog(cmd.Items, products)
	res, st := a.do(ctx, w, OrderKey(cmd.OrderID), cmd)
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusCreated, orderOut(res.Order))
}

// orderCommand checks an order's body and builds its command; a message
// is a 400 naming the field. A line item without a unit price keeps -1
// there until fillFromCatalog takes the product's.
func (a *API) orderCommand(b *orderBody) (*CreateOrder, string) {
	switch {
	case b.CustomerID == "":
		return nil, "customerId is required"
	case len(b.LineItems) == 0:
		return nil, "lineItems is required and must not be empty"
	case len(b.LineItems) > MaxLineItems:
		return nil, fmt.Sprintf("at most %d lineItems, got %d", MaxLineItems, len(b.LineItems))
	case utf8.RuneCountInString(b.CustomerID) > MaxTextLen:
		return nil, fmt.Sprintf("customerId must be at most %d characters", MaxTextLen)
	}
	cmd := &CreateOrder{OrderID: newID(), CustomerID: b.CustomerID, ShippingAddress: b.ShippingAddress,
		CustomerName: b.CustomerName, CustomerEmail: b.CustomerEmail, PaymentMethod: b.PaymentMethod, DeadlineNs: int64(a.deadline), RetentionNs: int64(a.retention),
		ClosePayment: true}
	if cmd.PaymentMethod == "" {
		cmd.PaymentMethod = DefaultPaymentMethod
	}
	cmd.Items = make([]LineItem, len(b.LineItems))
	for i := range b.LineItems {
		item, msg := lineItemOf(i, &b.LineItems[i])
		if msg != "" {
			return nil, msg
		}
		cmd.Items[i] = item
	}
	return cmd, ""
}

// lineItemOf checks the body's line item i; a message is a 400.
func lineItemOf(i int, it *lineItemBody) (LineItem, string) {
	if it.ProductID == "" {
		return LineItem{}, fmt.Sprintf("lineItems[%d].productId is required", i)
	}
	if utf8.RuneCountInString(it.ProductID) > MaxTextLen {
		return LineItem{}, fmt.Sprintf("lineItems[%d].productId must be at most %d characters", i, MaxTextLen)
	}
	if it.Quantity < 1 || it.Quantity > MaxQuantity {
		return LineItem{}, fmt.Sprintf("lineItems[%d].quantity must be between 1 and %d", i, MaxQuantity)
	}
	name := fmt.Sprintf("lineItems[%d].unitPrice", i)
	price, set, msg := moneyField(name, it.UnitPrice)
	if msg != "" {
		return LineItem{}, msg
	}
	if set && price < 1 {
		// As for a product's price and a payment's amount: an order of
		// 0.00 would be "paid" by a payment POST /api/payments refuses.
		return LineItem{}, name + " must be at least 0.01"
	}
	item := LineItem{ProductID: it.ProductID, ProductName: it.ProductName, SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: -1}
	if set {
		item.UnitPriceCents = price
	}
	return item, ""
}

// lookUpOrder reads the customer (nil: unknown) and each distinct product
// of items (by id; nil: unknown). They are looked up at once: a query
// waits until what it read is durable, so one after another would put a
// group commit per lookup into every order's latency. The error is the
// first failed lookup's, the products' in order before the customer's.
func (a *API) lookUpOrder(ctx context.Context, customerID string, items []LineItem) (*Customer, map[string]*Product, error) {
	var ids []string
	seen := map[string]bool{}
	for _, it := range items {
		if !seen[it.ProductID] {
			seen[it.ProductID] = true
			ids = append(ids, it.ProductID)
		}
	}
	found := make([]*Product, len(ids))
	errs := make([]error, len(ids)+1)
	var cu *Customer
	var wg sync.WaitGroup
	wg.Go(func() {
		cu, errs[len(ids)] = query[*Customer](ctx, a, CustomerKey(customerID), &GetCustomer{ID: customerID})
	})
	for i, id := range ids {
		wg.Go(func() {
			found[i], errs[i] = query[*Product](ctx, a, ProductKey(id), &GetProduct{ID: id})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	products := make(map[string]*Product, len(ids))
	for i, id := range ids {
		products[id] = found[i]
	}
	return cu, products, nil
}

// fillFromCatalog completes each line item from its product: the unit
// price, name and SKU the client left out. An unknown product's item is
// filled by unknownInOrder.
func fillFromCatalog(items []LineItem, products map[string]*Product) {
	for i := range items {
		it := &items[i]
		p := products[it.ProductID]
		if p == nil {
			unknownInOrder(it)
			continue
		}
		if it.UnitPriceCents < 0 {
			it.UnitPriceCents = p.PriceCents
		}
		if it.ProductName == "" {
			it.ProductName = p.Name
		}
		if it.SKU == "" {
			it.SKU = p.SKU
		}
	}
}

// unknownInOrder fills a line item whose product was not found: the
// product's reservation fails in the saga, which then cancels the order
// naming the product. A missing unit price counts as 0.00 (there is no
// price to take it from), as the order is never paid.
func unknownInOrder(it *LineItem) {
	if it.UnitPriceCents < 0 {
		it.UnitPriceCents = 0
	}
}

func (a *API) readOrder(ctx context.Context, id string) (*Order, error) {
	return query[*Order](ctx, a, OrderKey(id), &GetOrder{ID: id})
}

// parseWait reads ?wait= as a duration ("10s", "500ms") or whole seconds.
func parseWait(s string) (time.Duration, string) {
	if s == "" {
		return 0, ""
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err2 := strconv.Atoi(s)
		if err2 != nil {
			return 0, "wait must be a duration such as 10s or 500ms (or whole seconds), got " + api.Quote(s)
		}
		if n < 0 || n > int(MaxWait/time.Second) {
			// Checked before multiplying: a large n would overflow into
			// some duration the client never asked for.
			return 0, fmt.Sprintf("wait must be between 0s and %v, got %s", MaxWait, api.Quote(s))
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > MaxWait {
		return 0, fmt.Sprintf("wait must be between 0s and %v, got %s", MaxWait, api.Quote(s))
	}
	return d, ""
}

// getOrder answers the order; with ?wait= it first waits until the order
// is CONFIRMED or CANCELLED or the wait has passed, and answers the order
// as it is then (still PENDING if the wait passed).
func (a *API) getOrder(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "order", id)
	}
	wait, msg := parseWait(r.URL.Query().Get("wait"))
	if msg != "" {
		return api.Error(w, http.StatusBadRequest, msg)
	}
	ctx := r.Context()
	var wt *waiter
	var rs *api.Stream
	if wait > 0 {
		// The wait may outlast the server's write timeout.
		rs = api.OpenStream(w, r)
		defer rs.Close()
		wt = a.hub.waiters.AddPoll(id)
		defer a.hub.waiters.Remove(id, wt)
	}
	deadline := time.Now().Add(wait)
	o, err := a.readOrder(ctx, id)
	if err != nil {
		return engineError(w, err)
	}
	if o == nil {
		return notFound(w, "order", id)
	}
	for wt != nil && !terminalOrder(o.Status) {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if !wt.Wait(ctx, a.done, left) {
			if ctx.Err() != nil {
				return 499 // the client went away; nobody reads an answer
			}
			wt = nil // closing: answer the order as it is now
		}
		if o, err = a.readOrder(ctx, id); err != nil {
			return engineError(w, err)
		}
		if o == nil {
			return notFound(w, "order", id)
		}
	}
	if rs == nil {
		return writeJSON(w, http.StatusOK, orderOut(o))
	}
	b, _ := json.Marshal(orderOut(o))
	if rs.Reply(http.StatusOK, append(b, '\n')) != nil {
		return 499
	}
	return http.StatusOK
}

func (a *API) orderSub(w http.ResponseWriter, r *http.Request) int {
	id, sub := r.PathValue("id"), r.PathValue("sub")
	switch {
	case id == "customer":
		// Only this list is heavy: an order's stream or events holding a
		// turn (a stream for its whole life) would stall the large lists.
		return a.heavy(func(w http.ResponseWriter, r *http.Request) int { return a.ordersByCustomer(w, r, sub) })(w, r)
	case sub == "events":
		if _, ok := pathID(r, "id"); !ok {
			return notFound(w, "order", id)
		}
		return a.events(w, r, "order", id, OrderKey(id))
	case sub == "stream":
		return a.streamOrder(w, r)
	}
	return api.Error(w, http.StatusNotFound, "no route "+api.Quote(r.URL.Path)+"; see docs/API.md for the routes")
}

// streamOrder sends the order as a server-sent event now and at every
// status change, and ends once the order is CONFIRMED or CANCELLED.
func (a *API) streamOrder(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "order", id)
	}
	ctx := r.Context()
	wt := a.hub.waiters.AddStream(id)
	if wt == nil {
		return a.hub.refused(w)
	}
	defer a.hub.waiters.Remove(id, wt)
	o, err := a.readOrder(ctx, id)
	if err != nil {
		return engineError(w, err)
	}
	if o == nil {
		return notFound(w, "order", id)
	}
	// It lives until the order ends, past the server's write timeout;
	// it holds one event (one order) at a time, written within the stall
	// timeout.
	rs := api.OpenStream(w, r)
	defer rs.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(o *Order) bool {
		b, _ := json.Marshal(orderOut(o))
		return rs.Write(fmt.Appendf(nil, "event: status\nid: %s\ndata: %s\n\n", o.Status, b)) == nil
	}
	last := o.Status
	if !send(o) {
		return http.StatusOK
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for !terminalOrder(last) {
		select {
		case <-wt.C():
		case <-ping.C:
			if rs.Write([]byte(": ping\n\n")) != nil {
				return http.StatusOK
			}
		case <-ctx.Done():
			return http.StatusOK
		case <-a.done:
			return http.StatusOK
		}
		if o, err = a.readOrder(ctx, id); err != nil || o == nil {
			return http.StatusOK
		}
		if o.Status != last {
			last = o.Status
			if !send(o) {
				return http.StatusOK
			}
		}
	}
	return http.StatusOK
}

func (a *API) ordersByCustomer(w http.ResponseWriter, r *http.Request, cid string) int {
	if cid == "" || len(cid) > MaxTextLen || api.CheckText(cid) != "" {
		return notFound(w, "customer", cid)
	}
	limit, st := parseLimit(w, r, 100)
	if st != 0 {
		return st
	}
	cu, err := query[*Customer](r.Context(), a, CustomerKey(cid), &GetCustomer{ID: cid})
	if err != nil {
		return engineError(w, err)
	}
	if cu == nil {
		return notFound(w, "customer", cid)
	}
	parts, err := fanout[[]Order](r.Context(), a, &OrdersByCustomer{CustomerID: cid, Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	return a.writeOrders(w, parts, limit)
}

func (a *API) listOrders(w http.ResponseWriter, r *http.Request) int {
	limit, st := parseLimit(w, r, 100)
	if st != 0 {
		return st
	}
	parts, err := fanout[[]Order](r.Context(), a, &ListOrders{Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	return a.writeOrders(w, parts, limit)
}

func (a *API) writeOrders(w http.ResponseWriter, parts [][]Order, limit int) int {
	var all []Order
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(x, y Order) int { return strings.Compare(x.ID, y.ID) })
	out := make([]orderDTO, 0, min(limit, len(all)))
	for i := range all[:min(limit, len(all))] {
		out = append(out, orderOut(&all[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) confirmOrder(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "order", id)
	}
	res, st := a.do(r.Context(), w, OrderKey(id), &ConfirmOrder{OrderID: id})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, orderOut(res.Order))
}

func (a *API) cancelOrder(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "order", id)
	}
	var b struct {
		Reason      string `json:"reason"`
		CancelledBy string `json:"cancelledBy"`
	}
	if st := readJSON(w, r, maxBody, &b); st != 0 {
		return st
	}
	res, st := a.do(r.Context(), w, OrderKey(id), &CancelOrder{OrderID: id, Reason: b.Reason, CancelledBy: b.CancelledBy})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, orderOut(res.Order))
}

// --- sagas ---

func (a *API) getSaga(w http.ResponseWriter, r *http.Request) int {
	_, s, code := a.sagaOfPath(w, r)
	if s == nil {
		return code
	}
	return writeJSON(w, http.StatusOK, sagaOut(s))
}

// sagaOfPath reads the saga named by the path's {id}; without one it has
// answered (404, or the engine's error) and returns that status.
func (a *API) sagaOfPath(w http.ResponseWriter, r *http.Request) (id string, s *Saga, code int) {
	id, ok := pathID(r, "id")
	if !ok {
		return id, nil, notFound(w, "saga", id)
	}
	s, err := query[*Saga](r.Context(), a, OrderKey(id), &GetSaga{ID: id})
	if err != nil {
		return id, nil, engineError(w, err)
	}
	if s == nil {
		return id, nil, notFound(w, "saga", id)
	}
	return id, s, 0
}

var sagaStatuses = []string{SagaStarted, SagaInProgress, SagaCompleted, SagaCompensating, SagaCompensated, SagaFailed, SagaTimedOut}

func (a *API) listSagas(w http.ResponseWriter, r *http.Request) int {
	limit, st := parseLimit(w, r, 100)
	if st != 0 {
		return st
	}
	q := r.URL.Query()
	status, typ := q.Get("status"), q.Get("type")
	if status != "" && !slices.Contains(sagaStatuses, status) {
		return api.Error(w, http.StatusBadRequest, "status must be one of "+strings.Join(sagaStatuses, ", ")+", got "+api.Quote(status))
	}
	if typ != "" && typ != SagaType {
		// The only saga type there is; a filter for another matches none.
		api.Write(w, http.StatusOK, true, []byte("[]\n"))
		return http.StatusOK
	}
	parts, err := fanout[[]Saga](r.Context(), a, &ListSagas{Status: status, Type: typ, Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	var all []Saga
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(x, y Saga) int { return strings.Compare(x.ID, y.ID) })
	out := make([]sagaDTO, 0, min(limit, len(all)))
	for i := range all[:min(limit, len(all))] {
		out = append(out, sagaOut(&all[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

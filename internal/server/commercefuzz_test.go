package server

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/module"
	"github.com/surge-run/surge/internal/workload/commerce"
)

// TestCommerceHTTPFuzz is TestHTTPFuzz for the commerce routes: the real
// server, valid-looking requests over customers, products and stock,
// orders and payments, most of them mutated the same ways (bodies,
// headers, methods, paths). Every answer obeys the rules send checks (no
// 5xx, every 4xx a JSON error). At the end every order the server
// accepted must have ended, and for every product the stock must add up:
// available = on hand − reserved ≥ 0, on hand = what it was created with +
// what 2xx replenishments added (the peer's stock model: a confirmed
// order's units stay reserved), and what its events hold reserved for the
// confirmed orders = what they bought. Every
// confirmed order's payment is captured for its total; no cancelled
// order's payment stays captured. A refused request that changed stock or
// money fails these.
func TestCommerceHTTPFuzz(t *testing.T) {
	// A short saga deadline: a step the fuzzer discards from the
	// dead-letter queue leaves its saga to the deadline's compensation.
	base := serveForTest(t, Config{Partitions: 4, Settings: module.Settings{"saga-deadline": 3 * time.Second}})
	f := &fuzzer{
		t: t, base: base,
		rng: rand.New(rand.NewPCG(*httpFuzzSeed, 0xc0ffee)),
		client: &http.Client{
			Timeout:       30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Transport:     &http.Transport{ExpectContinueTimeout: 5 * time.Second, MaxIdleConnsPerHost: 4},
		},
	}
	c := &commerceFuzz{f: f, stock: map[string]int64{}, seen: map[string]bool{}}
	for i := range 3 {
		c.learn("POST /api/customers", c.do(fzReq{method: "POST", path: "/api/customers",
			body: []byte(fmt.Sprintf(`{"email":"c%d@x.io","name":"Customer %d"}`, i, i))}, 201))
		c.learn("POST /api/products", c.do(fzReq{method: "POST", path: "/api/products",
			body: []byte(fmt.Sprintf(`{"sku":"FZ-%d","name":"Product %d","price":"%d.50","quantityOnHand":%d}`, i, i, 1+i*3000, 5+i))}, 201))
	}
	counts := map[int]int{}
	n := *httpFuzzN
	for range n {
		r, route := c.generate()
		orig := r.method + " " + r.path
		if f.rng.IntN(10) < 5 {
			f.mutate(&r)
		}
		st, _, b := f.send(r)
		counts[st]++
		// A 2xx to a request whose method or path a mutation changed
		// answers some other route: only the route's own answers teach.
		if st >= 200 && st < 300 && r.method+" "+r.path == orig {
			c.learn(route, b)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	c.check()
	t.Logf("statuses: %v; %d customers, %d products, %d orders, %d dead-letter entries seen", counts, len(c.customers), len(c.products), len(c.orders), len(c.parked))
	if n >= 1000 && (counts[201] == 0 || counts[400] == 0 || counts[404] == 0 || counts[409] == 0) {
		t.Errorf("the generator missed an outcome: %v", counts)
	}
}

type commerceFuzz struct {
	f                           *fuzzer
	customers, products, orders []string
	parked                      []string // dead-letter entry ids seen listed
	seen                        map[string]bool
	stock                       map[string]int64 // created with + replenished, by product
}

func (c *commerceFuzz) do(r fzReq, want int) []byte {
	c.f.t.Helper()
	st, _, b := c.f.send(r)
	if st != want {
		c.f.t.Fatalf("%s %s: %d %s, want %d", r.method, r.path, st, b, want)
	}
	return b
}

func (c *commerceFuzz) any(ids []string, other ...string) string {
	if len(ids) > 0 && c.f.rng.IntN(4) > 0 {
		return ids[c.f.rng.IntN(len(ids))]
	}
	return c.f.pick(append(other, "nope", "6b00cec0-e876-43d6-a5e8-e7a2325600ff", strings.Repeat("9", 300))...)
}

// generate makes a valid-looking request and names its route.
func (c *commerceFuzz) generate() (fzReq, string) {
	f := c.f
	p, cu, o := url.PathEscape(c.any(c.products)), url.PathEscape(c.any(c.customers)), url.PathEscape(c.any(c.orders))
	qty := f.pick("1", "2", "3", "7", "100")
	switch f.rng.IntN(19) {
	case 0, 1, 2, 3:
		var items []string
		for range 1 + f.rng.IntN(3) {
			items = append(items, fmt.Sprintf(`{"productId":%q,"quantity":%s,"unitPrice":%s}`, c.any(c.products), f.pick("1", "1", "2", "4"), f.pick(`"10.00"`, `19.99`, `"0.01"`, `12`)))
		}
		body := fmt.Sprintf(`{"customerId":%q,"lineItems":[%s],"shippingAddress":"1 Main St","paymentMethod":%q}`,
			c.any(c.customers), strings.Join(items, ","), f.pick("CREDIT_CARD", "CREDIT_CARD", "BITCOIN"))
		return fzReq{method: "POST", path: "/api/orders", body: []byte(body)}, "POST /api/orders"
	case 4:
		return fzReq{method: "POST", path: "/api/products/" + p + "/stock/reserve",
			body: []byte(fmt.Sprintf(`{"orderId":"d%d","quantity":%s}`, f.rng.IntN(5), qty))}, "POST /api/products/{id}/stock/reserve"
	case 5:
		return fzReq{method: "POST", path: "/api/products/" + p + "/stock/release",
			body: []byte(fmt.Sprintf(`{"orderId":"d%d","quantity":%s,"reason":"fz"}`, f.rng.IntN(5), qty))}, "POST /api/products/{id}/stock/release"
	case 6:
		return fzReq{method: "POST", path: "/api/products/" + p + "/stock/replenish",
			body: []byte(fmt.Sprintf(`{"quantity":%s,"reason":"fz"}`, qty))}, "POST /api/products/{id}/stock/replenish"
	case 7:
		return fzReq{method: "PATCH", path: "/api/orders/" + o + "/cancel", body: []byte(`{"reason":"fz","cancelledBy":"fuzzer"}`)}, "PATCH /api/orders/{id}/cancel"
	case 8:
		return fzReq{method: "PATCH", path: "/api/orders/" + o + "/confirm"}, "PATCH /api/orders/{id}/confirm"
	case 9:
		return fzReq{method: "POST", path: "/api/payments", body: []byte(fmt.Sprintf(`{"orderId":%q,"customerId":%q,"amount":%s,"currency":"EUR"}`,
			c.any(c.orders, "free-order"), c.any(c.customers), f.pick(`"5.00"`, `10`, `20000.00`)))}, "POST /api/payments"
	case 10:
		return fzReq{method: "POST", path: "/api/payments/PAY-" + o + "/refund", body: []byte(`{"reason":"fz"}`)}, "POST /api/payments/{id}/refund"
	case 11:
		return fzReq{method: "POST", path: "/api/customers", body: []byte(fmt.Sprintf(`{"email":"f%d@x.io","name":"Fuzz %d","phone":"1"}`, f.rng.IntN(50), f.rng.IntN(50)))}, "POST /api/customers"
	case 12:
		return fzReq{method: "PATCH", path: "/api/customers/" + cu + "/status", body: []byte(fmt.Sprintf(`{"status":%q,"reason":"fz"}`, f.pick("ACTIVE", "SUSPENDED", "CLOSED", "GONE")))}, "PATCH /api/customers/{id}/status"
	case 13:
		return fzReq{method: "POST", path: "/api/products", body: []byte(fmt.Sprintf(`{"sku":"S%d","name":"P %d","price":%s,"quantityOnHand":%d}`,
			f.rng.IntN(40), f.rng.IntN(40), f.pick(`"3.00"`, `4.5`, `"0.00"`), f.rng.IntN(8)))}, "POST /api/products"
	case 14:
		// Fault injection on or off: forward saga steps are parked while
		// it is on, and what the fuzzer does to them must keep stock and
		// money whole.
		return fzReq{method: "POST", path: "/api/admin/fault?enabled=" + f.pick("true", "false", "false") + "&failureMessage=fz"}, "POST /api/admin/fault"
	case 15:
		return fzReq{method: "GET", path: "/api/admin/dlq?limit=" + f.pick("5", "50")}, "GET /api/admin/dlq"
	case 16:
		id := url.PathEscape(c.any(c.parked, "dlq-0-0", "dlq-3-99", "dlq-x"))
		if f.rng.IntN(3) == 0 {
			return fzReq{method: "DELETE", path: "/api/admin/dlq/" + id}, "DELETE /api/admin/dlq/{id}"
		}
		return fzReq{method: "POST", path: "/api/admin/dlq/" + id + "/replay"}, "POST /api/admin/dlq/{id}/replay"
	default:
		path := f.pick("/api/orders/"+o, "/api/orders/"+o+"?wait=1ms", "/api/orders/"+o+"/events", "/api/sagas/"+o, "/api/products/"+p,
			"/api/products/"+p+"/events", "/api/customers/"+cu, "/api/orders/customer/"+cu, "/api/payments/order/"+o, "/api/sagas?status=COMPLETED",
			"/api/orders?limit=3", "/api/customers?limit=2", "/api/products?limit=5",
			"/api/admin/dlq/count", "/api/admin/dlq/"+url.PathEscape(c.any(c.parked)), "/api/products/"+p+"/similar?limit=3")
		return fzReq{method: "GET", path: path}, "GET"
	}
}

// learn adds what a 2xx answer says the server did to the model.
func (c *commerceFuzz) learn(route string, b []byte) {
	var v struct {
		CustomerID     string `json:"customerId"`
		ProductID      string `json:"productId"`
		OrderID        string `json:"orderId"`
		QuantityOnHand int64  `json:"quantityOnHand"`
	}
	if route == "GET /api/admin/dlq" {
		var entries []struct{ ID string }
		if json.Unmarshal(b, &entries) == nil {
			for _, e := range entries {
				if !c.seen[e.ID] {
					c.seen[e.ID] = true
					c.parked = append(c.parked, e.ID)
				}
			}
		}
		return
	}
	if route == "GET" || json.Unmarshal(b, &v) != nil {
		return
	}
	switch route {
	case "POST /api/customers":
		c.customers = append(c.customers, v.CustomerID)
	case "POST /api/products":
		c.products = append(c.products, v.ProductID)
		c.stock[v.ProductID] = v.QuantityOnHand
	case "POST /api/orders":
		c.orders = append(c.orders, v.OrderID)
	}
}

type fzLine struct {
	ProductID string `json:"productId"`
	Quantity  int64  `json:"quantity"`
}

// check waits for every order to end, then checks stock and money.
func (c *commerceFuzz) check() {
	f := c.f
	f.t.Helper()
	// Fault off, and every step still parked replayed (or dropped by its
	// saga's end meanwhile: 404), so the sagas can end.
	c.do(fzReq{method: "POST", path: "/api/admin/fault?enabled=false"}, 200)
	for {
		var entries []struct{ ID string }
		if err := json.Unmarshal(c.do(fzReq{method: "GET", path: "/api/admin/dlq?limit=100"}, 200), &entries); err != nil {
			f.t.Fatal(err)
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			if st, _, b := f.send(fzReq{method: "POST", path: "/api/admin/dlq/" + url.PathEscape(e.ID) + "/replay"}); st != 200 && st != 404 {
				f.t.Fatalf("replaying %s: %d %s", e.ID, st, b)
			}
		}
	}
	// Every order the server holds, also those made by a request a
	// mutation left valid (a trailing slash, a query), which the model
	// did not learn.
	var all []struct {
		OrderID string `json:"orderId"`
	}
	if err := json.Unmarshal(c.do(fzReq{method: "GET", path: "/api/orders?limit=1000"}, 200), &all); err != nil {
		f.t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, o := range all {
		ids[o.OrderID] = true
	}
	for _, id := range c.orders {
		if !ids[id] {
			f.t.Fatalf("order %s, created with a 201, is not listed", id)
		}
	}
	// Past one page (long runs) the listed orders are not all of them:
	// stock is then checked against the products' own commits only.
	complete := len(all) < 1000
	sold := map[string]int64{}
	confirmed := map[string]bool{}
	for id := range ids {
		var o struct {
			Status    string          `json:"status"`
			Total     json.RawMessage `json:"paymentAmount"` // the total to the cent
			LineItems []fzLine        `json:"lineItems"`
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			b := c.do(fzReq{method: "GET", path: "/api/orders/" + url.PathEscape(id) + "?wait=5s"}, 200)
			if err := json.Unmarshal(b, &o); err != nil {
				f.t.Fatalf("order %s: %v %s", id, err, b)
			}
			if o.Status != "PENDING" || time.Now().After(deadline) {
				break
			}
		}
		st, _, pb := f.send(fzReq{method: "GET", path: "/api/payments/order/" + url.PathEscape(id)})
		var pay struct {
			Status string          `json:"status"`
			Amount json.RawMessage `json:"amount"`
		}
		if st == 200 {
			if err := json.Unmarshal(pb, &pay); err != nil {
				f.t.Fatalf("payment of %s: %v", id, err)
			}
		}
		switch o.Status {
		case "CONFIRMED":
			total, err1 := commerce.ParseMoney(strings.Trim(string(o.Total), `"`))
			amount, err2 := commerce.ParseMoney(strings.Trim(string(pay.Amount), `"`))
			if pay.Status != "CAPTURED" || err1 != nil || err2 != nil || total != amount {
				f.t.Fatalf("confirmed order %s (total %s): payment %d %s", id, o.Total, st, pb)
			}
			for _, l := range o.LineItems {
				sold[l.ProductID] += l.Quantity
			}
			confirmed[id] = true
		case "CANCELLED":
			if pay.Status == "CAPTURED" {
				f.t.Fatalf("cancelled order %s keeps a captured payment: %s", id, pb)
			}
		default:
			f.t.Fatalf("order %s did not end: %s", id, o.Status)
		}
	}
	for _, id := range c.products {
		var p struct {
			OnHand    int64 `json:"quantityOnHand"`
			Reserved  int64 `json:"quantityReserved"`
			Available int64 `json:"availableQuantity"`
		}
		b := c.do(fzReq{method: "GET", path: "/api/products/" + url.PathEscape(id)}, 200)
		if err := json.Unmarshal(b, &p); err != nil {
			f.t.Fatal(err)
		}
		if p.Reserved < 0 || p.Available < 0 || p.Available != p.OnHand-p.Reserved {
			f.t.Fatalf("product %s: %s", id, b)
		}
		var added, held int64
		b = c.do(fzReq{method: "GET", path: "/api/products/" + url.PathEscape(id) + "/events?limit=1000"}, 200)
		var evs []struct {
			EventType string            `json:"eventType"`
			Data      map[string]string `json:"data"`
		}
		if err := json.Unmarshal(b, &evs); err != nil {
			f.t.Fatal(err)
		}
		for _, e := range evs {
			var q int64
			fmt.Sscan(e.Data["quantity"], &q)
			switch e.EventType {
			case "StockReplenished":
				added += q
			case "StockReserved":
				if confirmed[e.Data["orderId"]] {
					held += q
				}
			case "StockReleased":
				if confirmed[e.Data["orderId"]] {
					held -= q
				}
			}
		}
		if len(evs) >= 1000 || evs[0].EventType != "ProductCreated" {
			continue // the history no longer starts at the creation: cannot add up
		}
		if p.OnHand != c.stock[id]+added || complete && held != sold[id] {
			f.t.Fatalf("product %s: on hand %d, held for confirmed orders %d, they bought %d, created with %d, replenished %d; events %s", id, p.OnHand, held, sold[id], c.stock[id], added, b)
		}
	}
}

package commerce_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/commerce"
)

// newServer runs the commerce API over a real engine and log in a temp
// dir, with the hub fed by the engine's notes as `surge serve` does.
func newServer(t *testing.T, deadline time.Duration) *httptest.Server {
	t.Helper()
	return newServerRetention(t, deadline, commerce.DefaultSagaRetention)
}

// newServerRetention is newServer with the given saga retention.
func newServerRetention(t *testing.T, deadline, retention time.Duration) *httptest.Server {
	t.Helper()
	return newServerHub(t, deadline, retention, commerce.NewHub(0))
}

// newServerHub is newServerRetention with the given hub.
func newServerHub(t *testing.T, deadline, retention time.Duration, hub *commerce.Hub) *httptest.Server {
	t.Helper()
	eng := enginetest.APIEngine(t, engine.Options{Partitions: 4,
		Notify: func(_ int, wl uint8, v any) {
			if wl == commerce.WorkloadID {
				hub.Notify(v)
			}
		}}, commerce.Workload{})
	mux := http.NewServeMux()
	capi := commerce.NewAPI(eng, hub).SetSagaDeadline(deadline).SetSagaRetention(retention)
	capi.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { capi.Shutdown(); srv.Close(); eng.Close() })
	return srv
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// must does a request that must answer want, and decodes the JSON answer.
func must(t *testing.T, srv *httptest.Server, want int, method, path, body string) map[string]any {
	t.Helper()
	st, b := do(t, srv, method, path, body)
	if st != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, st, b, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(b), &v); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, b)
	}
	return v
}

func mustList(t *testing.T, srv *httptest.Server, path string) []map[string]any {
	t.Helper()
	st, b := do(t, srv, "GET", path, "")
	if st != 200 {
		t.Fatalf("GET %s: %d %s", path, st, b)
	}
	var v []map[string]any
	if err := json.Unmarshal([]byte(b), &v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
	return v
}

func hasFields(t *testing.T, v map[string]any, fields ...string) {
	t.Helper()
	for _, f := range fields {
		if _, ok := v[f]; !ok {
			t.Fatalf("field %q missing in %v", f, v)
		}
	}
}

func seed(t *testing.T, srv *httptest.Server, price string, onHand int) (customer, product string) {
	t.Helper()
	c := must(t, srv, 201, "POST", "/api/customers", `{"email":"a@b.c","name":"Ann","address":"1 Road","phone":"123"}`)
	p := must(t, srv, 201, "POST", "/api/products", fmt.Sprintf(`{"sku":"SKU-1","name":"Lamp","description":"d","price":%s,"quantityOnHand":%d,"category":"home"}`, price, onHand))
	return c["customerId"].(string), p["productId"].(string)
}

func TestCustomersAndProducts(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "19.99", 10)
	c := must(t, srv, 200, "GET", "/api/customers/"+cid, "")
	hasFields(t, c, "customerId", "email", "name", "address", "phone", "status")
	if c["status"] != "ACTIVE" || c["name"] != "Ann" {
		t.Fatalf("%v", c)
	}
	c = must(t, srv, 200, "PUT", "/api/customers/"+cid, `{"email":"x@y.z","name":"Bob"}`)
	if c["name"] != "Bob" || c["address"] != nil {
		t.Fatalf("PUT: %v", c)
	}
	c = must(t, srv, 200, "PATCH", "/api/customers/"+cid+"/status", `{"status":"SUSPENDED","reason":"test"}`)
	if c["status"] != "SUSPENDED" {
		t.Fatalf("PATCH: %v", c)
	}
	if l := mustList(t, srv, "/api/customers?limit=10"); len(l) != 1 || l[0]["customerId"] != cid {
		t.Fatalf("list: %v", l)
	}
	evs := mustList(t, srv, "/api/customers/"+cid+"/events?limit=20")
	if len(evs) != 3 || evs[0]["eventType"] != "CustomerCreated" || evs[2]["eventType"] != "CustomerStatusChanged" {
		t.Fatalf("events: %v", evs)
	}
	if evs := mustList(t, srv, "/api/customers/"+cid+"/events?limit=1"); len(evs) != 1 || evs[0]["sequence"] != 3.0 {
		t.Fatalf("events limit 1: %v", evs)
	}

	st, b := do(t, srv, "GET", "/api/products/"+pid, "")
	if st != 200 || !strings.Contains(b, `"price":19.99`) {
		t.Fatalf("product: %d %s", st, b)
	}
	p := must(t, srv, 200, "GET", "/api/products/"+pid, "")
	hasFields(t, p, "productId", "sku", "name", "description", "price", "quantityOnHand", "quantityReserved", "availableQuantity", "category", "status")
	p = must(t, srv, 200, "POST", "/api/products/"+pid+"/stock/reserve", `{"quantity":4,"orderId":"perftest-1"}`)
	if p["quantityReserved"] != 4.0 || p["availableQuantity"] != 6.0 {
		t.Fatalf("reserve: %v", p)
	}
	must(t, srv, 409, "POST", "/api/products/"+pid+"/stock/reserve", `{"quantity":7,"orderId":"perftest-2"}`)
	p = must(t, srv, 200, "POST", "/api/products/"+pid+"/stock/release", `{"quantity":4,"orderId":"perftest-1","reason":"r"}`)
	if p["quantityReserved"] != 0.0 {
		t.Fatalf("release: %v", p)
	}
	p = must(t, srv, 200, "POST", "/api/products/"+pid+"/stock/replenish", `{"quantity":5,"reason":"r"}`)
	if p["quantityOnHand"] != 15.0 || p["status"] != "ACTIVE" {
		t.Fatalf("replenish: %v", p)
	}
	if l := mustList(t, srv, "/api/products"); len(l) != 1 {
		t.Fatalf("products: %v", l)
	}
	if evs := mustList(t, srv, "/api/products/"+pid+"/events"); len(evs) != 4 {
		t.Fatalf("product events: %v", evs)
	}
	// A string price is accepted too.
	p = must(t, srv, 201, "POST", "/api/products", `{"sku":"S2","name":"N","price":"5.5","quantityOnHand":1}`)
	if p["price"] != 5.5 {
		t.Fatalf("%v", p)
	}
}

func waitOrder(t *testing.T, srv *httptest.Server, id string) map[string]any {
	t.Helper()
	o := must(t, srv, 200, "GET", "/api/orders/"+id+"?wait=10s", "")
	if o["status"] == "PENDING" {
		t.Fatalf("still PENDING after the long poll: %v", o)
	}
	return o
}

func TestOrderSagaConfirmed(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 100)
	// unitPrice as a string (the peer's k6), as a number, as a number a
	// client computed in floating point (2.4999999999999996 means 2.50),
	// and missing.
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1,"unitPrice":"10.00"},{"productId":%q,"quantity":2,"unitPrice":2.4999999999999996},{"productId":%q,"quantity":1}],"shippingAddress":"x"}`, cid, pid, pid, pid))
	hasFields(t, o, "orderId", "customerId", "lineItems", "subtotal", "tax", "total", "status", "shippingAddress", "createdAt", "updatedAt")
	if o["status"] != "PENDING" || o["subtotal"] != 25.0 || o["tax"] != 2.5 || o["total"] != 27.5 {
		t.Fatalf("created: %v", o)
	}
	id := o["orderId"].(string)
	if o = waitOrder(t, srv, id); o["status"] != "CONFIRMED" {
		t.Fatalf("%v", o)
	}
	s := must(t, srv, 200, "GET", "/api/sagas/"+id, "")
	if s["status"] != "COMPLETED" || len(s["steps"].([]any)) == 0 {
		t.Fatalf("saga: %v", s)
	}
	if l := mustList(t, srv, "/api/sagas?type=OrderFulfillment"); len(l) != 0 {
		t.Fatalf("a filter for another saga type matched %d sagas", len(l))
	}
	if l := mustList(t, srv, "/api/sagas?status=COMPLETED&type=ORDER_FULFILLMENT&limit=5"); len(l) != 1 {
		t.Fatalf("sagas: %v", l)
	}
	pay := must(t, srv, 200, "GET", "/api/payments/order/"+id, "")
	hasFields(t, pay, "paymentId", "orderId", "customerId", "amount", "currency", "method", "status", "transactionId", "failureReason")
	if pay["status"] != "CAPTURED" || pay["amount"] != 27.5 {
		t.Fatalf("payment: %v", pay)
	}
	must(t, srv, 200, "GET", "/api/payments/"+pay["paymentId"].(string), "")
	must(t, srv, 409, "POST", "/api/payments/"+pay["paymentId"].(string)+"/refund", `{"reason":"r"}`)
	must(t, srv, 200, "PATCH", "/api/orders/"+id+"/confirm", "")
	if l := mustList(t, srv, "/api/orders/customer/"+cid); len(l) != 1 {
		t.Fatalf("by customer: %v", l)
	}
	if l := mustList(t, srv, "/api/orders"); len(l) != 1 {
		t.Fatalf("orders: %v", l)
	}
	if evs := mustList(t, srv, "/api/orders/"+id+"/events?limit=100"); len(evs) < 3 || evs[0]["eventType"] != "OrderCreated" {
		t.Fatalf("order events: %v", evs)
	}
}

func TestOrderSagaCancelled(t *testing.T) {
	srv := newServer(t, time.Minute)
	// Over 10000.00: the processor declines, the saga compensates.
	cid, pid := seed(t, srv, "20000.00", 5)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	id := o["orderId"].(string)
	if o = waitOrder(t, srv, id); o["status"] != "CANCELLED" {
		t.Fatalf("%v", o)
	}
	if s := must(t, srv, 200, "GET", "/api/sagas/"+id, ""); s["status"] != "COMPENSATED" {
		t.Fatalf("saga: %v", s)
	}
	// Not enough stock.
	o = must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":6,"unitPrice":1}]}`, cid, pid))
	if o = waitOrder(t, srv, o["orderId"].(string)); o["status"] != "CANCELLED" {
		t.Fatalf("%v", o)
	}
	// A cancelled order cannot be confirmed.
	st, _ := do(t, srv, "PATCH", "/api/orders/"+id+"/confirm", "")
	if st != 409 {
		t.Fatalf("confirm cancelled: %d", st)
	}
}

func TestSagaDeadline(t *testing.T) {
	srv := newServer(t, time.Nanosecond)
	cid, pid := seed(t, srv, "1.00", 5)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	id := o["orderId"].(string)
	waitOrder(t, srv, id)
	s := must(t, srv, 200, "GET", "/api/sagas/"+id, "")
	if s["status"] != "TIMED_OUT" && s["status"] != "COMPLETED" {
		t.Fatalf("saga: %v", s)
	}
}

func TestStreamDeliversTerminalStatus(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "3.00", 5)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	resp, err := http.Get(srv.URL + "/api/orders/" + o["orderId"].(string) + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var statuses []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var v map[string]any
			json.Unmarshal([]byte(d), &v)
			statuses = append(statuses, v["status"].(string))
		}
	}
	if len(statuses) == 0 || statuses[len(statuses)-1] != "CONFIRMED" {
		t.Fatalf("stream statuses %v", statuses)
	}
}

func TestPayments(t *testing.T) {
	srv := newServer(t, time.Minute)
	p := must(t, srv, 201, "POST", "/api/payments", `{"orderId":"o-1","customerId":"c","amount":"12.50","currency":"USD","method":"CREDIT_CARD"}`)
	if p["status"] != "CAPTURED" || p["amount"] != 12.5 {
		t.Fatalf("%v", p)
	}
	id := p["paymentId"].(string)
	must(t, srv, 200, "GET", "/api/payments/"+id, "")
	if r := must(t, srv, 200, "POST", "/api/payments/"+id+"/refund", `{"reason":"r"}`); r["status"] != "REFUNDED" {
		t.Fatalf("%v", r)
	}
	must(t, srv, 409, "POST", "/api/payments/"+id+"/refund", `{"reason":"r"}`)
	// A decline is 201 with FAILED.
	if p := must(t, srv, 201, "POST", "/api/payments", `{"orderId":"o-2","customerId":"c","amount":10000.01,"currency":"USD","method":"CREDIT_CARD"}`); p["status"] != "FAILED" || p["failureReason"] == "" {
		t.Fatalf("%v", p)
	}
	must(t, srv, 404, "GET", "/api/payments/nope", "")
}

func TestBadInput(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "1.00", 5)
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/api/customers", `{"email":"bad","name":"Ann"}`, 400},
		{"POST", "/api/customers", `{"email":"a@b.c","name":"A"}`, 400},
		{"POST", "/api/customers", `{"email":"a@b.c","name":"A\u0001nn"}`, 400},
		{"POST", "/api/customers", "{\"email\":\"a@b.c\",\"name\":\"A\xffnn\"}", 400},
		{"POST", "/api/customers", `{"email":`, 400},
		{"GET", "/api/customers/nope", "", 404},
		{"GET", "/api/customers/nope/events", "", 404},
		{"PATCH", "/api/customers/" + cid + "/status", `{"status":"GONE"}`, 400},
		{"POST", "/api/products", `{"sku":"s","name":"n","price":0,"quantityOnHand":1}`, 400},
		{"POST", "/api/products", `{"sku":"s","name":"n","price":"1.234","quantityOnHand":1}`, 400},
		{"POST", "/api/products", `{"sku":"s","name":"n","quantityOnHand":1}`, 400},
		{"POST", "/api/products/" + pid + "/stock/reserve", `{"quantity":0,"orderId":"x"}`, 400},
		{"POST", "/api/products/" + pid + "/stock/reserve", `{"quantity":1}`, 400},
		{"POST", "/api/products/nope/stock/reserve", `{"quantity":1,"orderId":"x"}`, 404},
		{"POST", "/api/orders", `{"customerId":"` + strings.Repeat("c", 257) + `","lineItems":[{"productId":"` + pid + `","quantity":1}]}`, 400},
		{"POST", "/api/orders", `{"customerId":"` + cid + `","lineItems":[{"productId":"` + strings.Repeat("p", 257) + `","quantity":1}]}`, 400},
		{"POST", "/api/orders", `{"customerId":"` + cid + `","lineItems":[]}`, 400},
		{"POST", "/api/orders", `{"customerId":"` + cid + `","lineItems":[{"productId":"` + pid + `","quantity":1,"unitPrice":"ten"}]}`, 400},
		{"POST", "/api/orders", `{"customerId":"` + cid + `","lineItems":[{"productId":"` + pid + `","quantity":1,"unitPrice":0}]}`, 400},
		{"POST", "/api/orders", `{"customerId":"` + cid + `","lineItems":[{"productId":"` + pid + `","quantity":1,"unitPrice":10.005}]}`, 400},
		{"GET", "/api/orders/nope", "", 404},
		{"GET", "/api/orders/nope?wait=1s", "", 404},
		{"GET", "/api/orders/nope?wait=forever", "", 400},
		{"GET", "/api/orders/nope?wait=2m", "", 400},
		{"GET", "/api/orders/nope/events", "", 404},
		{"GET", "/api/orders/nope/stream", "", 404},
		{"GET", "/api/orders/customer/nope", "", 404},
		{"PATCH", "/api/orders/nope/confirm", "", 404},
		{"PATCH", "/api/orders/nope/cancel", `{"reason":"r","cancelledBy":"me"}`, 404},
		{"GET", "/api/sagas/nope", "", 404},
		{"GET", "/api/sagas?status=DONE", "", 400},
		{"GET", "/api/customers?limit=x", "", 400},
		{"POST", "/api/payments", `{"orderId":"o","customerId":"c","amount":1,"currency":"usd"}`, 400},
		{"POST", "/api/payments/PAY-nope/refund", `{"reason":"r"}`, 404},
	} {
		st, b := do(t, srv, c.method, c.path, c.body)
		if st != c.want || !strings.Contains(b, `"error"`) {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, st, b, c.want)
		}
	}
	// Content-Type that is not JSON.
	req, _ := http.NewRequest("POST", srv.URL+"/api/customers", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Fatalf("text/plain: %d", resp.StatusCode)
	}
	// Nothing above changed state.
	if l := mustList(t, srv, "/api/customers"); len(l) != 1 {
		t.Fatalf("customers: %v", l)
	}
	if l := mustList(t, srv, "/api/orders"); len(l) != 0 {
		t.Fatalf("orders: %v", l)
	}
	// A suspended customer cannot order.
	must(t, srv, 200, "PATCH", "/api/customers/"+cid+"/status", `{"status":"SUSPENDED"}`)
	must(t, srv, 422, "POST", "/api/orders", `{"customerId":"`+cid+`","lineItems":[{"productId":"`+pid+`","quantity":1}]}`)
}

func TestLongPollReturnsWhenTerminal(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "1.00", 5)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	start := time.Now()
	o = must(t, srv, 200, "GET", "/api/orders/"+o["orderId"].(string)+"?wait=30s", "")
	if o["status"] != "CONFIRMED" || time.Since(start) > 25*time.Second { // woken, not the 30 s wait run out
		t.Fatalf("%v after %v", o, time.Since(start))
	}
	// A wait on an order that fails its saga ends at CANCELLED: 4 of the
	// 5 units are held directly and the order wants 2.
	must(t, srv, 200, "POST", "/api/products/"+pid+"/stock/reserve", `{"quantity":4,"orderId":"hold"}`)
	o = must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":2}]}`, cid, pid))
	if o = waitOrder(t, srv, o["orderId"].(string)); o["status"] != "CANCELLED" {
		t.Fatalf("%v", o)
	}
}

// TestSagaPurgedAfterRetention: with a short saga retention, an ended
// saga answers 200, then 404 and leaves the saga list, while its order,
// payment and events still answer.
func TestSagaPurgedAfterRetention(t *testing.T) {
	const retention = time.Second
	srv := newServerRetention(t, time.Minute, retention)
	cid, pid := seed(t, srv, "10.00", 100)
	// The saga ends after start, so it is purged after start+retention.
	start := time.Now()
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	id := o["orderId"].(string)
	if o = waitOrder(t, srv, id); o["status"] != "CONFIRMED" {
		t.Fatalf("%v", o)
	}
	// On a loaded machine the 200 is only checked if it came in time.
	st, b := do(t, srv, "GET", "/api/sagas/"+id, "")
	if time.Since(start) < retention/2 && (st != 200 || !strings.Contains(b, `"COMPLETED"`)) {
		t.Fatalf("saga right after it ended: %d %s", st, b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, b = do(t, srv, "GET", "/api/sagas/"+id, "")
		if st == 404 {
			break
		}
		if st != 200 || time.Now().After(deadline) {
			t.Fatalf("saga not purged 20 s after a retention of %v: %d %s", retention, st, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Since(start) < retention {
		t.Fatalf("saga purged %v after the order was created, before its retention of %v", time.Since(start), retention)
	}
	for _, s := range mustList(t, srv, "/api/sagas?limit=100") {
		if s["sagaId"] == id {
			t.Fatalf("a purged saga is still listed: %v", s)
		}
	}
	if o := must(t, srv, 200, "GET", "/api/orders/"+id, ""); o["status"] != "CONFIRMED" {
		t.Fatalf("order after the saga's purge: %v", o)
	}
	must(t, srv, 200, "GET", "/api/payments/"+o["paymentId"].(string), "")
	if evs := mustList(t, srv, "/api/orders/"+id+"/events?limit=100"); len(evs) == 0 {
		t.Fatal("the order's events went with its saga")
	}
}

// TestFractionalQuantity: a quantity sent with a fraction or an exponent
// is refused with a 400 naming the field, never truncated, and changes
// nothing; whole numbers still work.
func TestFractionalQuantity(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "1.00", 5)
	for _, n := range []string{"1.5", "1.0", "1e3", "1E0", "2.5e1"} {
		for _, c := range []struct{ path, body, field string }{
			{"/api/products", `{"sku":"s","name":"nn","price":1,"quantityOnHand":` + n + `}`, "quantityOnHand"},
			{"/api/products/" + pid + "/stock/replenish", `{"quantity":` + n + `}`, "quantity"},
			{"/api/products/" + pid + "/stock/reserve", `{"quantity":` + n + `,"orderId":"x"}`, "quantity"},
			{"/api/orders", `{"customerId":"` + cid + `","lineItems":[{"productId":"` + pid + `","quantity":` + n + `}]}`, "lineItems.quantity"},
		} {
			st, b := do(t, srv, "POST", c.path, c.body)
			if st != 400 || !strings.Contains(b, c.field) || !strings.Contains(b, "whole number") {
				t.Errorf("POST %s %s: %d %s, want 400 naming %s as a whole number", c.path, c.body, st, b, c.field)
			}
		}
	}
	if l := mustList(t, srv, "/api/products"); len(l) != 1 || l[0]["quantityOnHand"] != 5.0 || l[0]["quantityReserved"] != 0.0 {
		t.Fatalf("products changed: %v", l)
	}
	if l := mustList(t, srv, "/api/orders"); len(l) != 0 {
		t.Fatalf("orders: %v", l)
	}
	must(t, srv, 200, "POST", "/api/products/"+pid+"/stock/replenish", `{"quantity":3}`)
}

// TestTrailingSlash: a collection route with a trailing slash answers as
// without it (Spring matches both), and an empty id never reaches a
// handler: /api/orders/ is the collection, not order "".
func TestTrailingSlash(t *testing.T) {
	srv := newServer(t, time.Minute)
	c := must(t, srv, 201, "POST", "/api/customers/", `{"email":"a@b.c","name":"Ann"}`)
	p := must(t, srv, 201, "POST", "/api/products/", `{"sku":"s","name":"nn","price":1,"quantityOnHand":5}`)
	cid, pid := c["customerId"].(string), p["productId"].(string)
	o := must(t, srv, 201, "POST", "/api/orders/", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	oid := o["orderId"].(string)
	must(t, srv, 201, "POST", "/api/payments/", `{"orderId":"o-1","customerId":"c","amount":1,"currency":"USD"}`)
	for _, c := range []struct{ path, field, id string }{
		{"/api/customers/", "customerId", cid}, {"/api/products/", "productId", pid},
		{"/api/orders/", "orderId", oid}, {"/api/sagas/", "sagaId", oid},
	} {
		if l := mustList(t, srv, c.path); len(l) != 1 || l[0][c.field] != c.id {
			t.Errorf("GET %s: %v", c.path, l)
		}
	}
	// Item routes are unchanged, and empty ids are not ids.
	must(t, srv, 200, "GET", "/api/orders/"+oid, "")
	mustList(t, srv, "/api/orders/"+oid+"/events")
	for _, c := range []struct{ method, path, body string }{
		{"PATCH", "/api/orders//confirm", ""},
		{"PATCH", "/api/orders//cancel", `{"reason":"r","cancelledBy":"me"}`},
		{"GET", "/api/orders//events", ""},
		{"GET", "/api/orders/customer/", ""},
		{"GET", "/api/customers//events", ""},
		{"POST", "/api/products//stock/reserve", `{"quantity":1,"orderId":"x"}`},
		{"GET", "/api/payments/", ""},
	} {
		st, b := do(t, srv, c.method, c.path, c.body)
		if st < 400 || st >= 500 || !strings.Contains(b, `"error"`) {
			t.Errorf("%s %s: %d %s, want a 4xx JSON error", c.method, c.path, st, b)
		}
	}
}

// TestListOrder pins what docs/API.md promises for lists: the limit
// smallest ids in ascending order, over every partition, which (ids being
// random) is not the order of creation that the peer's Spring Data gives.
func TestListOrder(t *testing.T) {
	srv := newServer(t, time.Minute)
	var ids []string
	for i := range 12 {
		c := must(t, srv, 201, "POST", "/api/customers", fmt.Sprintf(`{"email":"a%d@b.c","name":"Ann"}`, i))
		ids = append(ids, c["customerId"].(string))
	}
	slices.Sort(ids)
	for _, n := range []int{1, 5, 12, 20} {
		l := mustList(t, srv, fmt.Sprintf("/api/customers?limit=%d", n))
		var got []string
		for _, c := range l {
			got = append(got, c["customerId"].(string))
		}
		if want := ids[:min(n, len(ids))]; !slices.Equal(got, want) {
			t.Fatalf("limit %d: %v, want the smallest ids %v", n, got, want)
		}
	}
}

// TestDuplicateSKU: as for the peer, a product whose sku another product
// has is created (201, a new id); creations of one sku at once all succeed
// and make one product each.
func TestDuplicateSKU(t *testing.T) {
	srv := newServer(t, time.Minute)
	_, pid := seed(t, srv, "1.00", 5)
	p := must(t, srv, 201, "POST", "/api/products", `{"sku":"SKU-1","name":"Other","price":2,"quantityOnHand":1}`)
	dup := p["productId"].(string)
	if dup == pid || p["sku"] != "SKU-1" || p["name"] != "Other" || p["quantityOnHand"] != 1.0 {
		t.Fatalf("duplicate sku: %v, want a new product beside %s", p, pid)
	}
	must(t, srv, 200, "GET", "/api/products/"+dup, "")
	if l := mustList(t, srv, "/api/products"); len(l) != 2 {
		t.Fatalf("products after a duplicate: %v", l)
	}
	// An invalid product is still refused, whatever its sku.
	if st, b := do(t, srv, "POST", "/api/products", `{"sku":"SKU-1","name":"Other","price":2,"quantityOnHand":-1}`); st != 400 {
		t.Fatalf("invalid duplicate: %d %s", st, b)
	}

	const n = 8
	ids := make(chan string, n)
	for range n {
		go func() {
			st, b := do(t, srv, "POST", "/api/products", `{"sku":"SKU-RACE","name":"Race","price":1,"quantityOnHand":1}`)
			var v struct{ ProductID string }
			if st != 201 || json.Unmarshal([]byte(b), &v) != nil {
				t.Errorf("concurrent create: %d %s", st, b)
			}
			ids <- v.ProductID
		}()
	}
	seen := map[string]bool{}
	for range n {
		seen[<-ids] = true
	}
	if len(seen) != n || seen[""] {
		t.Fatalf("%d concurrent creations of one sku made products %v, want %d distinct", n, seen, n)
	}
	if l := mustList(t, srv, "/api/products"); len(l) != 2+n {
		t.Fatalf("products: %d, want %d", len(l), 2+n)
	}
}

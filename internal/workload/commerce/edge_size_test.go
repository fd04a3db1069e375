package commerce_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/commerce"
)

// fillTo returns a JSON body: obj with field set to a string that makes
// the body exactly n bytes.
func fillTo(t *testing.T, n int, obj map[string]any, field string) string {
	t.Helper()
	obj[field] = ""
	b, _ := json.Marshal(obj)
	obj[field] = strings.Repeat("x", n-len(b))
	b, _ = json.Marshal(obj)
	if len(b) != n {
		t.Fatalf("body of %d bytes, want %d", len(b), n)
	}
	return string(b)
}

// Every route that logs a command, given the largest body its limit
// allows (64 KiB, orders 512 KiB; longer than the machine takes, which
// may still log the command it refuses) or the longest legal fields,
// makes log entries within cmdlog.MaxEntryBytes, measured at the log:
// the saga's messages and the product a sku claim creates included.
func TestEveryRouteCommandFitsALogEntry(t *testing.T) {
	dir := t.TempDir()
	el := &apitest.EntryLog{Log: enginetest.OpenWAL(t, dir, 4)}
	hub := commerce.NewHub(0)
	eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: 4, Log: el,
		Notify: func(_ int, wl uint8, v any) {
			if wl == commerce.WorkloadID {
				hub.Notify(v)
			}
		}}, commerce.Workload{})
	mux := http.NewServeMux()
	capi := commerce.NewAPI(eng, hub).SetSagaDeadline(time.Minute)
	capi.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { capi.Shutdown(); srv.Close(); eng.Close() })

	const small, orders = 64 << 10, 512 << 10
	long := strings.Repeat("é", commerce.MaxTextLen/2)
	send := func(route string, want int, method, path, body string) map[string]any {
		t.Helper()
		st, b := do(t, srv, method, path, body)
		if want != 0 && st != want || st >= 500 {
			t.Fatalf("%s: %d %.300s, want %d", route, st, b, want)
		}
		if strings.Contains(route, "orders") {
			// Let the saga's messages be logged too. (A product's
			// creation is logged before its POST answers.)
			time.Sleep(200 * time.Millisecond)
		}
		if n := el.TakeMax(); n > cmdlog.MaxEntryBytes {
			t.Fatalf("%s: a log entry of %d bytes, over %d", route, n, cmdlog.MaxEntryBytes)
		} else {
			t.Logf("%s: largest entry %d bytes (HTTP %d)", route, n, st)
		}
		var v map[string]any
		_ = json.Unmarshal([]byte(b), &v)
		return v
	}
	customer := map[string]any{"email": "a@" + long[:200], "name": long[:100], "address": long, "phone": long}
	send("POST /api/customers (body at its limit)", 0, "POST", "/api/customers", fillTo(t, small, customer, "address"))
	customer["address"] = long
	cb, _ := json.Marshal(customer)
	cid := send("POST /api/customers", 201, "POST", "/api/customers", string(cb))["customerId"].(string)
	send("PUT /api/customers/{id} (body at its limit)", 0, "PUT", "/api/customers/"+cid, fillTo(t, small, customer, "address"))
	customer["address"] = long[:len(long)-2] + "x"
	cb, _ = json.Marshal(customer)
	send("PUT /api/customers/{id}", 200, "PUT", "/api/customers/"+cid, string(cb))
	send("PATCH /api/customers/{id}/status (body at its limit)", 0, "PATCH", "/api/customers/"+cid+"/status", fillTo(t, small, map[string]any{"status": "ACTIVE"}, "reason"))
	send("PATCH /api/customers/{id}/status", 200, "PATCH", "/api/customers/"+cid+"/status", `{"status":"SUSPENDED","reason":"`+long+`"}`)
	send("PATCH /api/customers/{id}/status", 200, "PATCH", "/api/customers/"+cid+"/status", `{"status":"ACTIVE","reason":"`+long+`"}`)

	product := map[string]any{"sku": long, "name": long, "price": "99999.99", "quantityOnHand": 1 << 30, "category": long}
	send("POST /api/products (body at its limit)", 0, "POST", "/api/products", fillTo(t, small, product, "description"))
	var pids []string
	for i := range commerce.MaxLineItems {
		product["sku"] = fmt.Sprintf("%03d", i) + long[3:]
		product["description"] = strings.Repeat("d", 4*commerce.MaxTextLen)
		pb, _ := json.Marshal(product)
		pids = append(pids, send("POST /api/products", 201, "POST", "/api/products", string(pb))["productId"].(string))
	}
	for _, op := range []string{"reserve", "release", "replenish"} {
		send("POST /api/products/{id}/stock/"+op+" (body at its limit)", 0, "POST", "/api/products/"+pids[1]+"/stock/"+op,
			fillTo(t, small, map[string]any{"quantity": 1, "orderId": long, "reason": ""}, "reason"))
		send("POST /api/products/{id}/stock/"+op, 200, "POST", "/api/products/"+pids[0]+"/stock/"+op,
			`{"quantity":1,"orderId":"`+long+`","reason":"`+long+`"}`)
	}

	order := map[string]any{"customerId": cid, "shippingAddress": long, "customerName": long, "customerEmail": long, "paymentMethod": "CREDIT_CARD"}
	var items []map[string]any
	for _, id := range pids {
		items = append(items, map[string]any{"productId": id, "quantity": 1, "unitPrice": "1.00", "productName": long, "sku": long})
	}
	order["lineItems"] = items
	send("POST /api/orders (body at its limit)", 0, "POST", "/api/orders", fillTo(t, orders, order, "shippingAddress"))
	order["shippingAddress"] = long
	ob, _ := json.Marshal(order)
	oid := send("POST /api/orders", 201, "POST", "/api/orders", string(ob))["orderId"].(string)
	send("PATCH /api/orders/{id}/cancel (body at its limit)", 0, "PATCH", "/api/orders/"+oid+"/cancel", fillTo(t, small, map[string]any{"cancelledBy": long}, "reason"))
	send("PATCH /api/orders/{id}/cancel", 0, "PATCH", "/api/orders/"+oid+"/cancel", `{"cancelledBy":"`+long+`","reason":"`+long+`"}`)
	oid = send("POST /api/orders", 201, "POST", "/api/orders", string(ob))["orderId"].(string)
	send("PATCH /api/orders/{id}/confirm", 0, "PATCH", "/api/orders/"+oid+"/confirm", "")

	payment := map[string]any{"orderId": long[:commerce.MaxTextLen-len("PAY-")], "customerId": long, "amount": "9999.99", "currency": "EUR"}
	send("POST /api/payments (body at its limit)", 0, "POST", "/api/payments", fillTo(t, small, payment, "method"))
	payment["method"] = long
	pb, _ := json.Marshal(payment)
	pay := send("POST /api/payments", 201, "POST", "/api/payments", string(pb))
	if id, ok := pay["paymentId"].(string); ok {
		send("POST /api/payments/{id}/refund (body at its limit)", 0, "POST", "/api/payments/"+url.PathEscape(id)+"/refund", fillTo(t, small, map[string]any{}, "reason"))
		send("POST /api/payments/{id}/refund", 0, "POST", "/api/payments/"+url.PathEscape(id)+"/refund", `{"reason":"`+long+`"}`)
	}
}

package commerce_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// pollGet reads path until ok accepts it, for up to 30 s: what a saga
// sends on after an order ends lands a moment later.
func pollGet(t *testing.T, srv *httptest.Server, path string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var v map[string]any
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if v = must(t, srv, 200, "GET", path, ""); ok(v) {
			return v
		}
	}
	t.Fatalf("GET %s: still %v after 30 s", path, v)
	return nil
}

func eventTypes(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	var types []string
	for _, e := range mustList(t, srv, path+"?limit=100") {
		types = append(types, e["eventType"].(string))
	}
	return strings.Join(types, " ")
}

// TestCancelConfirmedOrderAPI: the peer's stock numbers (a CONFIRMED order's
// units stay in quantityReserved, quantityOnHand does not move), then
// PATCH …/cancel on the CONFIRMED order: 200 CANCELLED, its units
// released, its payment refunded, the events recorded; a second cancel
// is 200 with no change.
func TestCancelConfirmedOrderAPI(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 10)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":3}]}`, cid, pid))
	id := o["orderId"].(string)
	if o = waitOrder(t, srv, id); o["status"] != "CONFIRMED" {
		t.Fatalf("%v", o)
	}
	p := must(t, srv, 200, "GET", "/api/products/"+pid, "")
	if p["quantityOnHand"] != 10.0 || p["quantityReserved"] != 3.0 || p["availableQuantity"] != 7.0 {
		t.Fatalf("a CONFIRMED order's product: %v", p)
	}
	if got := eventTypes(t, srv, "/api/products/"+pid+"/events"); got != "ProductCreated StockReserved" {
		t.Fatalf("product events %q", got)
	}

	o = must(t, srv, 200, "PATCH", "/api/orders/"+id+"/cancel", `{"reason":"changed my mind","cancelledBy":"customer"}`)
	if o["status"] != "CANCELLED" || o["cancellationReason"] != "changed my mind" || o["cancelledBy"] != "customer" {
		t.Fatalf("cancelled: %v", o)
	}
	pollGet(t, srv, "/api/products/"+pid, func(p map[string]any) bool {
		return p["quantityOnHand"] == 10.0 && p["quantityReserved"] == 0.0 && p["availableQuantity"] == 10.0
	})
	pollGet(t, srv, "/api/payments/order/"+id, func(p map[string]any) bool { return p["status"] == "REFUNDED" })
	if got := eventTypes(t, srv, "/api/products/"+pid+"/events"); got != "ProductCreated StockReserved StockReleased" {
		t.Fatalf("product events %q", got)
	}
	if got := eventTypes(t, srv, "/api/orders/"+id+"/events"); !strings.HasSuffix(got, "OrderStatusChanged") {
		t.Fatalf("order events %q", got)
	}
	if s := must(t, srv, 200, "GET", "/api/sagas/"+id, ""); s["status"] != "COMPLETED" {
		t.Fatalf("saga %v", s)
	}
	again := must(t, srv, 200, "PATCH", "/api/orders/"+id+"/cancel", `{"reason":"again","cancelledBy":"customer"}`)
	if again["cancellationReason"] != "changed my mind" {
		t.Fatalf("a second cancel changed the order: %v", again)
	}
	must(t, srv, 409, "PATCH", "/api/orders/"+id+"/confirm", "")
}

// TestUnknownIDsCancelledBySaga: an order for a customer or a product
// that does not exist is 201 PENDING, as with the peer, and its saga then
// cancels it (COMPENSATED) with a reason naming the unknown id.
func TestUnknownIDsCancelledBySaga(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 10)
	for _, c := range []struct{ customer, product, reason string }{
		{"no-such-customer", pid, `customer "no-such-customer" not found`},
		{cid, "no-such-product", `product "no-such-product" not found`},
	} {
		o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":2,"unitPrice":"10.00"}]}`, c.customer, c.product))
		if o["status"] != "PENDING" {
			t.Fatalf("created: %v", o)
		}
		id := o["orderId"].(string)
		if o = waitOrder(t, srv, id); o["status"] != "CANCELLED" || !strings.Contains(o["cancellationReason"].(string), c.reason) {
			t.Fatalf("order of %s/%s: %v", c.customer, c.product, o)
		}
		s := must(t, srv, 200, "GET", "/api/sagas/"+id, "")
		if s["status"] != "COMPENSATED" || !strings.Contains(s["failureReason"].(string), c.reason) {
			t.Fatalf("saga: %v", s)
		}
		if st, _ := do(t, srv, "GET", "/api/payments/order/"+id, ""); st != 404 {
			t.Fatalf("an order of an unknown id has a payment: %d", st)
		}
	}
	// Nothing stays reserved, and the known customer's order still runs.
	pollGet(t, srv, "/api/products/"+pid, func(p map[string]any) bool { return p["quantityReserved"] == 0.0 })
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	if o = waitOrder(t, srv, o["orderId"].(string)); o["status"] != "CONFIRMED" {
		t.Fatalf("%v", o)
	}
}

// TestDirectPaymentOfACancelledOrderAPI: a client pays for the order it
// just placed (POST /api/payments with its total), and the order is then
// cancelled before its saga asks for the payment, here because the
// product has too few units. The payment is refunded, or, if the order
// was cancelled first, refused (409); never left captured.
func TestDirectPaymentOfACancelledOrderAPI(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 10)
	refunded, refused := 0, 0
	for range 20 {
		o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":11}]}`, cid, pid))
		id := o["orderId"].(string)
		st, body := do(t, srv, "POST", "/api/payments", fmt.Sprintf(`{"orderId":%q,"customerId":%q,"amount":%v,"currency":"USD","method":"CREDIT_CARD"}`,
			id, cid, o["paymentAmount"]))
		if o = waitOrder(t, srv, id); o["status"] != "CANCELLED" {
			t.Fatalf("order of 11 of 10 units: %v", o)
		}
		switch st {
		case 201:
			pollGet(t, srv, "/api/payments/order/"+id, func(p map[string]any) bool { return p["status"] == "REFUNDED" })
			refunded++
		case 409:
			refused++
		default:
			t.Fatalf("direct payment: %d %s", st, body)
		}
	}
	t.Logf("%d refunded, %d refused", refunded, refused)
}

// TestOrderStreamsTakeNoListTurn: an order's event stream holds no turn
// of the large lists (API.heavy), whatever its query says: streams open
// with ?limit=1000 on orders that stay PENDING, more than there are
// turns, and a 1,000-item list is still answered.
func TestOrderStreamsTakeNoListTurn(t *testing.T) {
	srv := newServer(t, 10*time.Minute)
	cid, pid := seed(t, srv, "10.00", 10)
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=true", "") // sagas park: orders stay PENDING
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var orders []string
	for range runtime.GOMAXPROCS(0) + 1 {
		o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
		orders = append(orders, o["orderId"].(string))
	}
	opened := make(chan error, len(orders))
	for _, id := range orders {
		go func() {
			req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/orders/"+id+"/stream?limit=1000", nil)
			if err == nil {
				var resp *http.Response
				if resp, err = srv.Client().Do(req); err == nil {
					if resp.StatusCode != 200 {
						err = fmt.Errorf("stream: %d", resp.StatusCode)
					}
					go func() { <-ctx.Done(); resp.Body.Close() }()
				}
			}
			opened <- err
		}()
	}
	for range orders {
		select {
		case err := <-opened:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an order stream waits for a turn of the large lists")
		}
	}
	if st, body := do(t, srv, "GET", "/api/orders?limit=1000", ""); st != 200 {
		t.Fatalf("list: %d %s", st, body)
	}
}

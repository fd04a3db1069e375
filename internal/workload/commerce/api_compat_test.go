package commerce_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPeerErrorShape: every refusal of a commerce route has the peer's
// fields {message, errorCode, timestamp, details}, with the code the
// peer's service for that route uses, and keeps "error" for Surge's own
// clients.
func TestPeerErrorShape(t *testing.T) {
	srv := newServer(t, time.Minute)
	_, pid := seed(t, srv, "1.00", 5)
	for _, c := range []struct {
		method, path, ctype, body string
		status                    int
		code                      string
	}{
		{"GET", "/api/orders/nope", "", "", 404, "ORDER_NOT_FOUND"},
		{"GET", "/api/customers/nope", "", "", 404, "CUSTOMER_NOT_FOUND"},
		{"GET", "/api/payments/PAY-nope", "", "", 404, "PAYMENT_NOT_FOUND"},
		{"GET", "/api/sagas/nope", "", "", 404, "SAGA_NOT_FOUND"},
		{"POST", "/api/products/" + pid + "/stock/reserve", "application/json", `{"quantity":6,"orderId":"o1"}`, 409, "INSUFFICIENT_STOCK"},
		{"POST", "/api/products", "application/json", `{"sku":"s","name":"n"}`, 400, "VALIDATION_ERROR"},
		{"POST", "/api/customers", "application/json", `{"email":`, 400, "VALIDATION_ERROR"},
		{"POST", "/api/customers", "text/plain", `{}`, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"POST", "/api/orders", "application/json", `{"customerId":"c","lineItems":[{"productId":"p","quantity":1,"x":"` + strings.Repeat("a", 600<<10) + `"}]}`, 413, "PAYLOAD_TOO_LARGE"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e map[string]any
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || err != nil {
			t.Fatalf("%s %s: %d (%v), want %d", c.method, c.path, resp.StatusCode, err, c.status)
		}
		msg, _ := e["message"].(string)
		ts, _ := e["timestamp"].(string)
		details, hasDetails := e["details"]
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || msg == "" || e["errorCode"] != c.code ||
			!hasDetails || details != nil || e["error"] != msg {
			t.Errorf("%s %s: %v, want message, errorCode %s, an RFC 3339 timestamp, details null and error = message", c.method, c.path, e, c.code)
		}
	}
}

// TestPeerValues: optional strings nobody sent are null, as the peer sends
// them, and an order's tax and total are unrounded (four decimals) while
// its payment is whole cents.
func TestPeerValues(t *testing.T) {
	srv := newServer(t, time.Minute)
	c := must(t, srv, 201, "POST", "/api/customers", `{"email":"a@b.c","name":"Ann"}`)
	p := must(t, srv, 201, "POST", "/api/products", `{"sku":"S","name":"Lamp","price":"399.97","quantityOnHand":5}`)
	for _, f := range []struct {
		v     map[string]any
		field string
	}{{c, "address"}, {c, "phone"}, {p, "description"}, {p, "category"}} {
		if v, ok := f.v[f.field]; !ok || v != nil {
			t.Errorf("%s: %v, want null", f.field, v)
		}
	}
	cid, pid := c["customerId"].(string), p["productId"].(string)
	st, b := do(t, srv, "POST", "/api/orders", `{"customerId":"`+cid+`","lineItems":[{"productId":"`+pid+`","quantity":1}]}`)
	for _, want := range []string{`"subtotal":399.97,`, `"tax":39.9970,`, `"total":439.9670,`, `"paymentAmount":439.97,`,
		`"shippingAddress":null`, `"customerName":null`, `"customerEmail":null`} {
		if st != 201 || !strings.Contains(b, want) {
			t.Errorf("order: %d %s, want %s", st, b, want)
		}
	}
	var o struct{ OrderID string }
	json.Unmarshal([]byte(b), &o)
	if o := must(t, srv, 200, "GET", "/api/orders/"+o.OrderID+"?wait=30s", ""); o["status"] != "CONFIRMED" {
		t.Fatalf("order: %v", o)
	}
	st, b = do(t, srv, "GET", "/api/payments/order/"+o.OrderID, "")
	if st != 200 || !strings.Contains(b, `"amount":439.97,`) || !strings.Contains(b, `"failureReason":null`) {
		t.Errorf("payment: %d %s, want amount 439.97 and no failureReason", st, b)
	}
	// A line for a product nobody knows has no name or sku to fill in.
	st, b = do(t, srv, "POST", "/api/orders", `{"customerId":"`+cid+`","lineItems":[{"productId":"nope","quantity":1}]}`)
	if st != 201 || !strings.Contains(b, `"productName":null,"sku":null`) {
		t.Errorf("order for an unknown product: %d %s, want its line's productName and sku null", st, b)
	}
}

package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/module"
)

// surge serve serves the commerce admin routes and exports the
// dead-letter metrics on /metrics and /actuator/prometheus.
func TestServeCommerceDLQ(t *testing.T) {
	base := serveForTest(t, Config{Settings: module.Settings{"saga-deadline": time.Minute}})
	req := func(method, path, body string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	id := func(body, field string) string {
		var v map[string]any
		json.Unmarshal([]byte(body), &v)
		s, _ := v[field].(string)
		return s
	}
	if st, b := req("POST", "/api/admin/fault?enabled=true", ""); st != 200 {
		t.Fatalf("fault: %d %s", st, b)
	}
	_, c := req("POST", "/api/customers", `{"email":"a@b.c","name":"Ann"}`)
	_, p := req("POST", "/api/products", `{"sku":"s","name":"n","price":9.99,"quantityOnHand":10}`)
	if st, b := req("POST", "/api/orders", `{"customerId":"`+id(c, "customerId")+`","lineItems":[{"productId":"`+id(p, "productId")+`","quantity":1}]}`); st != 201 {
		t.Fatalf("order: %d %s", st, b)
	}
	for giveUp := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, b := req("GET", "/api/admin/dlq/count", "")
		if st == 200 && strings.Contains(b, `"count":1,`) {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatalf("count: %d %s", st, b)
		}
	}
	for _, path := range []string{"/metrics", "/actuator/prometheus"} {
		_, b := req("GET", path, "")
		for _, want := range []string{"surge_commerce_dlq_entries 1", "surge_commerce_fault_injection_enabled 1", `surge_commerce_dlq_total{event="parked"} 1`} {
			if !strings.Contains(b, want) {
				t.Fatalf("%s lacks %q", path, want)
			}
		}
	}
}

package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/module"
)

// surge serve serves the commerce routes beside ticketing, with the
// actuator aliases, and a saga's end reaches a long poll through the
// engine's Notify.
func TestServeCommerce(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Ready: ready, Settings: module.Settings{"saga-deadline": 30 * time.Second}})
	}()
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-errc:
		t.Fatal(err)
	}
	req := func(method, path, body string) (int, map[string]any, string) {
		t.Helper()
		r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v map[string]any
		json.Unmarshal(b, &v)
		return resp.StatusCode, v, string(b)
	}
	if st, v, b := req("GET", "/actuator/health", ""); st != 200 || v["status"] != "UP" {
		t.Fatalf("health: %d %s", st, b)
	}
	for _, probe := range []string{"/actuator/health/liveness", "/actuator/health/readiness"} {
		if st, v, b := req("GET", probe, ""); st != 200 || v["status"] != "UP" {
			t.Fatalf("%s: %d %s", probe, st, b)
		}
	}
	if st, v, b := req("GET", "/actuator/info", ""); st != 200 || v["app"] == nil {
		t.Fatalf("info: %d %s", st, b)
	}
	if st, _, b := req("GET", "/actuator/prometheus", ""); st != 200 || !strings.Contains(b, "surge_wal_fsync_seconds") {
		t.Fatalf("prometheus: %d", st)
	}
	_, c, _ := req("POST", "/api/customers", `{"email":"a@b.c","name":"Ann"}`)
	_, p, _ := req("POST", "/api/products", `{"sku":"s","name":"n","price":9.99,"quantityOnHand":100000}`)
	st, o, b := req("POST", "/api/orders", `{"customerId":"`+c["customerId"].(string)+`","lineItems":[{"productId":"`+p["productId"].(string)+`","quantity":1,"unitPrice":"10.00"}]}`)
	if st != 201 || o["status"] != "PENDING" {
		t.Fatalf("order: %d %s", st, b)
	}
	if st, o, b = req("GET", "/api/orders/"+o["orderId"].(string)+"?wait=10s", ""); st != 200 || o["status"] != "CONFIRMED" {
		t.Fatalf("long poll: %d %s", st, b)
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

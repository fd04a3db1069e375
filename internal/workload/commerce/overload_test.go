package commerce_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/workload/commerce"
)

// TestWaitersPastTheCap: with every --max-waiters place taken, a long
// poll is still answered 200 as a long poll (here with the order's final
// status, seen by its rechecks), not refused; a stream is refused 503
// with a Retry-After that gives each refused client its own turn (1 s,
// then 2 s while no place has been freed), not a fixed 1 s for all.
func TestWaitersPastTheCap(t *testing.T) {
	hub := commerce.NewHub(1)
	srv := newServerHub(t, time.Minute, commerce.DefaultSagaRetention, hub)
	release := commerce.HoldWaiter(hub, "someone-else")
	defer release()
	cid, pid := seed(t, srv, "1.00", 5)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	id := o["orderId"].(string)
	if o = must(t, srv, 200, "GET", "/api/orders/"+id+"?wait=30s", ""); o["status"] != "CONFIRMED" {
		t.Fatalf("long poll past the cap: %v; want the order CONFIRMED", o)
	}
	var afters []string
	start := time.Now()
	for range 2 {
		resp, err := http.Get(srv.URL + "/api/orders/" + id + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("stream past the cap: %d; want 503", resp.StatusCode)
		}
		afters = append(afters, resp.Header.Get("Retry-After"))
	}
	if afters[0] != "1" || (afters[1] != "2" && time.Since(start) < time.Second) {
		t.Fatalf("Retry-After of two streams refused at the cap: %q; want 1 then 2 (each its own turn)", afters)
	}
}

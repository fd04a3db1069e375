package commerce_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

type opsOrdersPage struct {
	Orders []struct{ OrderID, CustomerID, Status string }
	Next   string
}

// Orders page by id with a cursor and filter by status and customer on
// the server; a compensated saga's timeline marks its compensation and
// where each step ran.
func TestOperatorOrdersAndSagaTimeline(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 1000)
	c2 := must(t, srv, 201, "POST", "/api/customers", `{"email":"b@b.c","name":"Bob"}`)["customerId"].(string)
	var all []string
	for i := range 23 {
		c := cid
		if i%10 == 0 {
			c = c2
		}
		o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, c, pid))
		all = append(all, o["orderId"].(string))
		waitOrder(t, srv, o["orderId"].(string))
	}
	dear := must(t, srv, 201, "POST", "/api/products", `{"sku":"SKU-2","name":"Gold","price":20000.00,"quantityOnHand":5}`)["productId"].(string)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, dear))
	cancelled := o["orderId"].(string)
	all = append(all, cancelled)
	if o = waitOrder(t, srv, cancelled); o["status"] != "CANCELLED" {
		t.Fatalf("%v", o)
	}
	slices.Sort(all)

	page := func(query string) opsOrdersPage {
		t.Helper()
		st, b := do(t, srv, "GET", "/api/ops/orders?"+query, "")
		var p opsOrdersPage
		if st != 200 || json.Unmarshal([]byte(b), &p) != nil {
			t.Fatalf("%s: %d %s", query, st, b)
		}
		return p
	}
	var got []string
	after := ""
	for n := 0; ; n++ {
		p := page("limit=7&after=" + url.QueryEscape(after))
		for _, o := range p.Orders {
			got = append(got, o.OrderID)
		}
		if p.Next == "" {
			if n != 3 || len(p.Orders) != 3 {
				t.Errorf("last page is page %d of %d orders, want page 3 of 3", n, len(p.Orders))
			}
			break
		}
		after = p.Next
	}
	if !slices.Equal(got, all) {
		t.Errorf("paged %v\nwant %v", got, all)
	}
	if p := page("status=CANCELLED"); len(p.Orders) != 1 || p.Orders[0].OrderID != cancelled || p.Next != "" {
		t.Errorf("status=CANCELLED: %+v", p)
	}
	if p := page("status=CONFIRMED&customerId=" + c2); len(p.Orders) != 3 || p.Orders[0].CustomerID != c2 {
		t.Errorf("customer %s: %+v", c2, p)
	}

	var tl struct {
		Status    string
		Terminal  bool
		Partition int
		Products  []string
		Steps     []struct {
			Step, Status, At string
			Partitions       []int
			Compensation     bool
		}
	}
	st, b := do(t, srv, "GET", "/api/ops/sagas/"+cancelled, "")
	if st != 200 || json.Unmarshal([]byte(b), &tl) != nil {
		t.Fatalf("timeline: %d %s", st, b)
	}
	if tl.Status != "COMPENSATED" || !tl.Terminal || !slices.Equal(tl.Products, []string{dear}) {
		t.Errorf("timeline: %s", b)
	}
	var steps []string
	comp := false
	for _, s := range tl.Steps {
		steps = append(steps, s.Step+":"+s.Status)
		if len(s.Partitions) == 0 || s.At == "" {
			t.Errorf("step %+v: no partition or time", s)
		}
		if s.Step == "COMPENSATION" {
			comp = s.Compensation
		} else if s.Compensation {
			t.Errorf("step %s marked as compensation", s.Step)
		}
		if s.Step == "ORDER_CREATED" && !slices.Equal(s.Partitions, []int{tl.Partition}) {
			t.Errorf("ORDER_CREATED ran on %v, the order is on %d", s.Partitions, tl.Partition)
		}
	}
	if !comp || !strings.Contains(strings.Join(steps, " "), "PAYMENT:FAILED") {
		t.Errorf("steps %v: want a failed payment and a compensation", steps)
	}

	for _, c := range []struct{ path, msg string }{
		{"/api/ops/orders?limit=0", "limit must be a whole number from 1 to 200"},
		{"/api/ops/orders?limit=201", "from 1 to 200"},
		{"/api/ops/orders?status=LOST", "status must be one of PENDING, CONFIRMED, CANCELLED"},
		{"/api/ops/orders?customerId=%01", "customerId must be an id"},
		{"/api/ops/orders?after=" + strings.Repeat("x", 300), "at most 256 bytes"},
	} {
		if st, b := do(t, srv, "GET", c.path, ""); st != 400 || !strings.Contains(b, c.msg) {
			t.Errorf("%s: %d %s, want 400 %s", c.path, st, b, c.msg)
		}
	}
	if st, _ := do(t, srv, "GET", "/api/ops/sagas/nope", ""); st != 404 {
		t.Errorf("unknown saga: %d", st)
	}
}

package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// compatClient talks JSON to a server started by serveForTest.
type compatClient struct {
	t    *testing.T
	base string
}

func (c compatClient) req(method, path, body string) (int, []byte) {
	c.t.Helper()
	r, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		c.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, b
}

// id does a request that must answer 2xx and returns the field of its answer.
func (c compatClient) id(method, path, body, field string) string {
	c.t.Helper()
	st, b := c.req(method, path, body)
	var v map[string]any
	if st/100 != 2 || json.Unmarshal(b, &v) != nil {
		c.t.Fatalf("%s %s %s: %d %s, want 2xx", method, path, body, st, b)
	}
	s, _ := v[field].(string)
	if s == "" {
		c.t.Fatalf("%s %s: no %s in %s", method, path, field, b)
	}
	return s
}

// seedLoad is what the peer's data loader does: the same customers and
// products (fixed emails and skus, stock 100000, prices 9.99 up), keeping
// the ids the server answers.
func (c compatClient) seedLoad(n int) (customers, products []string) {
	for i := range n {
		customers = append(customers, c.id("POST", "/api/customers",
			fmt.Sprintf(`{"email":"customer%d@example.com","name":"Customer %d","address":"%d Main St","phone":"555-%04d"}`, i, i, i, i), "customerId"))
		products = append(products, c.id("POST", "/api/products",
			fmt.Sprintf(`{"sku":"SKU-%05d","name":"Product %d","description":"seed","price":%d.99,"quantityOnHand":100000,"category":"seed"}`, i, i, 9+i*30), "productId"))
	}
	return customers, products
}

// TestSeedRerun: a data loader run twice against the same server gets ids
// both times (the peer has no sku check, so neither has Surge's compat
// route), and orders placed against the ids of either load are accepted
// and confirmed.
func TestSeedRerun(t *testing.T) {
	c := compatClient{t, serveForTest(t, Config{Partitions: 4})}
	const n = 6
	c1, p1 := c.seedLoad(n)
	c2, p2 := c.seedLoad(n)
	for i := range n {
		if p1[i] == p2[i] || c1[i] == c2[i] {
			t.Fatalf("load 2 answered load 1's ids: %s %s", p2[i], c2[i])
		}
	}
	var orders []string
	for _, load := range [][2][]string{{c1, p1}, {c2, p2}} {
		for i, pid := range load[1] {
			cid := load[0][(i+1)%n]
			orders = append(orders, c.id("POST", "/api/orders",
				fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1,"unitPrice":"10.00"}]}`, cid, pid), "orderId"))
		}
	}
	for _, oid := range orders {
		st, b := c.req("GET", "/api/orders/"+oid+"?wait=30s", "")
		if st != 200 || !strings.Contains(string(b), `"status":"CONFIRMED"`) {
			t.Fatalf("order %s: %d %s, want CONFIRMED", oid, st, b)
		}
	}
	for _, pid := range append(p1, p2...) {
		st, b := c.req("GET", "/api/products/"+pid, "")
		if st != 200 || !strings.Contains(string(b), `"availableQuantity":99999`) {
			t.Fatalf("product %s after one order: %d %s", pid, st, b)
		}
	}
}

// TestDoubleSlash: a path with repeated slashes (a base URL ending in "/"
// joined to a route) is served as that route, not redirected.
func TestDoubleSlash(t *testing.T) {
	base := serveForTest(t, Config{Partitions: 4})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path, body string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		resp, err := noFollow.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	st, b := send("POST", "//api/customers", `{"email":"a@b.c","name":"Ann"}`)
	var c struct{ CustomerID string }
	if st != 201 || json.Unmarshal([]byte(b), &c) != nil {
		t.Fatalf("POST //api/customers: %d %s, want 201", st, b)
	}
	for _, p := range []string{"/api//customers/" + c.CustomerID, "/api/customers//" + c.CustomerID, "//api///customers/" + c.CustomerID} {
		if st, b := send("GET", p, ""); st != 200 || !strings.Contains(b, c.CustomerID) {
			t.Errorf("GET %s: %d %s, want the customer", p, st, b)
		}
	}
	if st, b := send("GET", "//v1/health_check", ""); st != 200 {
		t.Errorf("GET //v1/health_check: %d %s", st, b)
	}
	// An empty id is still no id: /api/orders//confirm is /api/orders/confirm.
	if st, b := send("PATCH", "/api/orders//confirm", ""); st < 400 || st >= 500 {
		t.Errorf("PATCH /api/orders//confirm: %d %s, want a 4xx", st, b)
	}
}

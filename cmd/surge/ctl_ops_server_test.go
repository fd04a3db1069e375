package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/server"
)

// serveConfig runs the real server with cfg on a free port for one test.
func serveConfig(t *testing.T, cfg server.Config) string {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg.Addr, cfg.DataDir, cfg.Partitions, cfg.Ready = "127.0.0.1:0", t.TempDir(), 2, ready
	cfg.MemoryLimit, cfg.Logger = -1, slog.New(slog.DiscardHandler)
	go func() { errc <- server.Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-errc:
		errc <- err
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return ""
}

// call makes one HTTP request with a JSON body and decodes the answer.
func call(t *testing.T, method, url, token, body string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	var v map[string]any
	_ = json.Unmarshal(b, &v)
	return v
}

// jsonLine runs a command with --json and decodes its one line into v.
func jsonLine(t *testing.T, base string, v any, args ...string) {
	t.Helper()
	out := ok(t, base, nil, append([]string{"--json"}, args...)...)
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("surge ctl --json %s: want one line, got %q", strings.Join(args, " "), out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("surge ctl --json %s: %v in %q", strings.Join(args, " "), err, out)
	}
}

// contains checks that out holds every want.
func contains(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: no %q in\n%s", what, w, out)
		}
	}
}

// The workload and cluster commands against the real server, with data
// from the three HTTP workloads: text and JSON.
func TestCtlOpsAgainstServer(t *testing.T) {
	pinZone(t)
	base := serveConfig(t, server.Config{})
	testTicketingCommands(t, base)
	testCommerceCommands(t, base)
	testSequencerCommands(t, base)
	testJobsLatency(t, base)
	testNodeCommands(t, base)
}

func testJobsLatency(t *testing.T, base string) {
	ok(t, base, nil, "queue", "create", "mail")
	ok(t, base, nil, "job", "submit", "mail", "one")
	ok(t, base, nil, "job", "submit", "mail", "two")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	workers := jqpbconnect.NewWorkerServiceClient(h2c(), base, connect.WithGRPC())
	if _, err := workers.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{WorkerId: "w", Concurrency: 1, Queues: []string{"mail"}})); err != nil {
		t.Fatal(err)
	}
	stream, err := workers.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled first: Close waits for the end of a stream the server keeps open.
	defer func() { cancel(); stream.Close() }()
	if !stream.Receive() {
		t.Fatalf("no assignment: %v", stream.Err())
	}
	out := ok(t, base, nil, "queue", "latency")
	if !regexp.MustCompile(`(?m)^mail\s+no\s+1\s+1\s+0\s+0\s+0\s+1\s+\S+\s+\S+\s+\S+\s*$`).MatchString(out) || !hasRow(out, "default", "no", "0", "0", "0", "0", "0", "0", "-", "-", "-") {
		t.Errorf("queue latency:\n%s", out)
	}
	var qs opsQueues
	jsonLine(t, base, &qs, "queue", "latency")
	if len(qs.Queues) != 2 || qs.Queues[1].Name != "mail" || qs.Queues[1].StartLatency.Samples != 1 || qs.Queues[1].StartLatency.P50Ms == nil {
		t.Errorf("queue latency --json: %+v", qs)
	}
}

func testTicketingCommands(t *testing.T, base string) {
	call(t, "POST", base+"/v1/event", "", `{"eventName":"show","artist":"band","areas":[{"areaId":"A","price":5,"rowCount":2,"colCount":3}]}`, 200)
	res := call(t, "POST", base+"/v2/reservations", "", `{"eventId":"show","areaId":"A","userId":"u1","type":"SELF_PICK","seats":[{"row":0,"col":1}]}`, 201)
	id := res["reservationId"].(string)

	out := ok(t, base, nil, "event", "list")
	if !hasRow(out, "show", "band", "1", "6", "1", "5", "16.7%") || strings.Contains(out, "Next page") {
		t.Errorf("event list:\n%s", out)
	}
	var evs opsEvents
	jsonLine(t, base, &evs, "event", "list", "--limit", "1")
	if len(evs.Events) != 1 || evs.Events[0].Sold != 1 || evs.Next != "" {
		t.Errorf("event list --json: %+v", evs)
	}
	out = ok(t, base, nil, "event", "show", "show")
	if !hasRow(out, "A", "5", "2", "3", "1", "5") {
		t.Errorf("event show:\n%s", out)
	}
	same(t, "event seats", ok(t, base, nil, "event", "seats", "show", "A"), `
Event show, area A: 2×3, 1 sold, 5 available (16.7% sold)

   0  .#.
   1  ...
`)
	contains(t, "reservation show", ok(t, base, nil, "reservation", "show", id), "State:          RESERVED", "Seats:          0:1")
	var r opsReservation
	jsonLine(t, base, &r, "reservation", "cancel", id)
	if r.State != "CANCELLED" || r.ReservationID != id {
		t.Errorf("reservation cancel --json: %+v", r)
	}
	if r := runCtl(t, base, nil, "event", "seats", "show", "Z"); r.status != 1 || r.errMsg != `surge ctl: 404 Not Found: no area "Z" in event "show"` {
		t.Errorf("unknown area: exit %d, %q", r.status, r.errMsg)
	}
	if r := runCtl(t, base, nil, "event", "list", "--limit", "500"); r.status != 1 || !strings.Contains(r.errMsg, "400 Bad Request: limit must be a whole number from 1 to 100") {
		t.Errorf("event list --limit 500: exit %d, %q", r.status, r.errMsg)
	}
}

func testCommerceCommands(t *testing.T, base string) {
	cust := call(t, "POST", base+"/api/customers", "", `{"email":"a@b.c","name":"Ann"}`, 201)["customerId"].(string)
	prod := call(t, "POST", base+"/api/products", "", `{"sku":"S1","name":"Lamp","price":10.00,"quantityOnHand":50}`, 201)["productId"].(string)
	order := func() string {
		return call(t, "POST", base+"/api/orders", "", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":2}]}`, cust, prod), 201)["orderId"].(string)
	}
	call(t, "POST", base+"/api/admin/fault?enabled=true", "", "", 200)
	stuck, dropped := order(), order()
	// The reservations reach the product's partition after the orders
	// are durable: the fault stays on until both are parked.
	var entries []opsDLQEntry
	for deadline := time.Now().Add(30 * time.Second); len(entries) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		jsonLine(t, base, &entries, "dlq", "list")
	}
	if len(entries) != 2 {
		t.Fatalf("dlq list --json: %+v, want the two parked reservations", entries)
	}
	call(t, "POST", base+"/api/admin/fault?enabled=false", "", "", 200)
	out := ok(t, base, nil, "dlq", "list")
	for _, e := range entries {
		if !hasRow(out, e.ID, "PARKED", e.EventType, e.OrderID) {
			t.Errorf("dlq list: no row for %s:\n%s", e.ID, out)
		}
	}
	contains(t, "dlq count", ok(t, base, nil, "dlq", "count"), "Parked now:       2", "Fault injection:  no", "Parked ever:      2")
	byOrder := map[string]string{entries[0].OrderID: entries[0].ID, entries[1].OrderID: entries[1].ID}
	contains(t, "saga show (stuck)", ok(t, base, nil, "saga", "show", stuck), "Dead letters:  1", "ORDER_CREATED")
	out = ok(t, base, nil, "dlq", "replay", byOrder[stuck])
	if !hasRow(out, byOrder[stuck], "REPLAYED") {
		t.Errorf("dlq replay:\n%s", out)
	}
	var discarded opsDLQEntry
	jsonLine(t, base, &discarded, "dlq", "discard", byOrder[dropped])
	if discarded.Status != "DISCARDED" || discarded.OrderID != dropped {
		t.Errorf("dlq discard --json: %+v", discarded)
	}
	if o := call(t, "GET", base+"/api/orders/"+stuck+"?wait=20s", "", "", 200); o["status"] != "CONFIRMED" {
		t.Fatalf("the replayed order: %v", o)
	}

	out = ok(t, base, nil, "order", "list", "--status", "CONFIRMED")
	if !hasRow(out, stuck, "CONFIRMED", cust, "22.0000", "1") || strings.Contains(out, dropped) {
		t.Errorf("order list --status CONFIRMED:\n%s", out)
	}
	var orders opsOrders
	jsonLine(t, base, &orders, "order", "list", "--limit", "1", "--customer", cust)
	if len(orders.Orders) != 1 || orders.Next != orders.Orders[0].OrderID {
		t.Errorf("order list --limit 1 --json: %+v", orders)
	}
	contains(t, "order show", ok(t, base, nil, "order", "show", stuck), "Status:     CONFIRMED", "Total:      22.0000")
	out = ok(t, base, nil, "saga", "show", stuck)
	contains(t, "saga show", out, "Status:        COMPLETED", "Dead letters:  0")
	if !regexp.MustCompile(`(?m)^\S+\s+STOCK_RESERVATION\s+COMPLETED\s+\d+\s+no$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\S+\s+PAYMENT\s+COMPLETED\s+\d+\s+no$`).MatchString(out) {
		t.Errorf("saga show: no completed stock and payment steps:\n%s", out)
	}
	var tl opsTimeline
	jsonLine(t, base, &tl, "saga", "show", stuck)
	if !tl.Terminal || tl.Status != "COMPLETED" || len(tl.Steps) < 3 {
		t.Errorf("saga show --json: %+v", tl)
	}
	if out := ok(t, base, nil, "saga", "list", "--status", "COMPLETED"); !hasRow(out, stuck, "COMPLETED") {
		t.Errorf("saga list:\n%s", out)
	}
	if out := ok(t, base, nil, "product", "list"); !hasRow(out, prod, "S1", "Lamp", "10.00", "50", "2", "48", "ACTIVE") {
		t.Errorf("product list:\n%s", out)
	}
	var p opsProduct
	jsonLine(t, base, &p, "product", "show", prod)
	if p.QuantityReserved != 2 || p.SKU != "S1" {
		t.Errorf("product show --json: %+v", p)
	}
	if r := runCtl(t, base, nil, "order", "list", "--status", "LOST"); r.status != 1 || !strings.Contains(r.errMsg, "400 Bad Request: status must be one of PENDING, CONFIRMED, CANCELLED") {
		t.Errorf("order list --status LOST: exit %d, %q", r.status, r.errMsg)
	}
}

func testSequencerCommands(t *testing.T, base string) {
	call(t, "POST", base+"/v1/groups/held/messages", "", `{"id":"m2","seq":2}`, 201)
	call(t, "POST", base+"/v1/groups/flow/messages", "", `{"messages":[{"id":"a"},{"id":"b"},{"id":"c"}]}`, 201)
	l := call(t, "POST", base+"/v1/groups/flow/lease", "", `{"processor":"p","max":3}`, 200)
	if n := len(l["messages"].([]any)); n != 3 {
		t.Fatalf("leased %d", n)
	}
	call(t, "POST", base+"/v1/groups/flow/complete", "", `{"processor":"p","seqs":[1,2,3]}`, 200)
	call(t, "POST", base+"/v1/groups/flow/consumers/c1/commit", "", `{"position":1}`, 200)

	out := ok(t, base, nil, "group", "list")
	if !hasRow(out, "flow", "server") || !regexp.MustCompile(`(?m)^flow\s+server\s+\d+\s+3\s+3\s+0\s+0\s+0\s+-\s+1\s+2\s*$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^held\s+client\s+\d+\s+0\s+2\s+1\s+0\s+0\s+1 \(unpublished\)\s+0\s+0\s*$`).MatchString(out) {
		t.Errorf("group list:\n%s", out)
	}
	var gs opsGroups
	jsonLine(t, base, &gs, "group", "list", "--limit", "1")
	if len(gs.Groups) != 1 || gs.Groups[0].Name != "flow" || gs.Next != "flow" {
		t.Errorf("group list --limit 1 --json: %+v", gs)
	}
	contains(t, "group show", ok(t, base, nil, "group", "show", "held"), "Gap:         1 (unpublished)", "Unreleased:  2")
	out = ok(t, base, nil, "consumer", "list", "flow")
	same(t, "consumer list", out, `
CONSUMER  POSITION  LAG
c1        1         2
`)
	var cs struct {
		Group     string
		Consumers []opsConsumer
	}
	jsonLine(t, base, &cs, "consumer", "list", "flow")
	if cs.Group != "flow" || len(cs.Consumers) != 1 || cs.Consumers[0].Lag != 2 {
		t.Errorf("consumer list --json: %+v", cs)
	}
	// Two redraws, a second apart; each after its header.
	out = ok(t, base, nil, "group", "show", "held", "--watch", "1s", "--count", "2")
	if strings.Count(out, "Every 1s: surge ctl group show") != 2 || strings.Count(out, "Gap:         1 (unpublished)") != 2 {
		t.Errorf("group show --watch 1s --count 2:\n%s", out)
	}
	if r := runCtl(t, base, nil, "group", "show", "held", "--watch", "10ms"); r.status != 2 || !strings.Contains(r.errMsg, "--watch 10ms: want 1s to 1h0m0s") {
		t.Errorf("--watch 10ms: exit %d, %q", r.status, r.errMsg)
	}
	if r := runCtl(t, base, nil, "group", "show", "nope"); r.status != 1 || r.errMsg != `surge ctl: 404 Not Found: no group "nope"` {
		t.Errorf("unknown group: exit %d, %q", r.status, r.errMsg)
	}
}

func testNodeCommands(t *testing.T, base string) {
	out := ok(t, base, nil, "overview")
	contains(t, "overview", out, "Healthy:  yes", "PARTITION  OWNER")
	if !regexp.MustCompile(`(?m)^Node:\s+\S+ \(embedded\), 2 partitions$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^0\s+\S+\s+\d+\s+[1-9]\d*\s+[1-9]`).MatchString(out) {
		t.Errorf("overview:\n%s", out)
	}
	var ov opsOverview
	jsonLine(t, base, &ov, "overview")
	if !ov.Healthy || len(ov.Partitions) != 2 || ov.Node.Mode != "embedded" {
		t.Errorf("overview --json: %+v", ov)
	}
	if r := runCtl(t, base, nil, "cluster"); r.status != 1 || !strings.Contains(r.errMsg, "404 Not Found: the server is not a node of a cluster") {
		t.Errorf("cluster on an embedded server: exit %d, %q", r.status, r.errMsg)
	}
	out = ok(t, base, nil, "status")
	contains(t, "status", out, "Healthy:         yes", "PARTITION  OWNER",
		"Ticketing:  1 events, 0 of 6 seats sold (0.0%)",
		"Commerce:   orders 1 pending, 1 confirmed, 0 cancelled; 0 dead letters",
		"Sequencer:  2 groups, 1 held by a missing seq, 0 messages held, consumer lag up to 2")
}

// With tokens on, --token is sent: a read token lists events but is
// refused the dead-letter queue (commerce:admin), and status says which
// sections it may not read.
func TestCtlOpsWithTokens(t *testing.T) {
	tokens := map[string]string{}
	var entries []auth.Entry
	for name, scope := range map[string]string{"reader": "ticketing:read,sequencer:read,jobs:read", "admin": "*:admin"} {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		sc, err := auth.ParseScopes(scope)
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
		entries = append(entries, auth.Entry{Name: name, Scopes: sc, Hash: auth.Hash(tok)})
	}
	table, err := auth.NewTable(entries, "")
	if err != nil {
		t.Fatal(err)
	}
	base := serveConfig(t, server.Config{Auth: server.AuthConfig{Tokens: table}})
	call(t, "POST", base+"/v1/event", tokens["admin"], `{"eventName":"e","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":1,"colCount":2}]}`, 200)

	if r := runCtl(t, base, nil, "event", "list"); r.status != 1 || !strings.HasPrefix(r.errMsg, "surge ctl: 401 Unauthorized: ") {
		t.Errorf("no token: exit %d, %q", r.status, r.errMsg)
	}
	if out := ok(t, base, nil, "--token", tokens["reader"], "event", "list"); !hasRow(out, "e", "a", "1", "2", "0", "2") {
		t.Errorf("event list with a read token:\n%s", out)
	}
	if r := runCtl(t, base, nil, "--token", tokens["reader"], "dlq", "list"); r.status != 1 || !strings.HasPrefix(r.errMsg, "surge ctl: 403 Forbidden: ") {
		t.Errorf("dlq list with a read token: exit %d, %q", r.status, r.errMsg)
	}
	out := ok(t, base, nil, "--token", tokens["reader"], "status")
	contains(t, "status with a read token", out, "Ticketing:  1 events, 0 of 2 seats sold", "Commerce:   - (403 Forbidden: ", "Sequencer:  0 groups")
	if out := ok(t, base, nil, "--token", tokens["admin"], "dlq", "count"); !strings.Contains(out, "Parked now:       0") {
		t.Errorf("dlq count with an admin token:\n%s", out)
	}
}

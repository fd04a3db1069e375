package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
)

// startClusterNode runs node id of cluster name in this process until
// its stop function is called or the test ends.
func startClusterNode(t *testing.T, brokers, name, id string) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, errc := make(chan string, 1), make(chan error, 1)
	cfg := server.Config{Addr: "127.0.0.1:0", Partitions: 4, Ready: ready, MemoryLimit: -1,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 20 * time.Second,
		Cluster: server.ClusterConfig{Kafka: brokers, Cluster: name, NodeID: id, SessionTimeout: 2 * time.Second}}
	go func() { errc <- server.Run(ctx, cfg) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("node %s: %v", id, err)
		}
	}
	t.Cleanup(stop)
	select {
	case addr := <-ready:
		return "http://" + addr, stop
	case err := <-errc:
		stopped = true
		t.Fatalf("node %s: %v", id, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("node %s did not start", id)
	}
	return "", stop
}

// waitOwners polls until every partition has an owner among want, and
// returns partition → node as `ctl cluster --json` shows it.
func waitOwners(t *testing.T, base string, want ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var v clusterView
		jsonLine(t, base, &v, "cluster")
		owners := map[string]string{}
		seen := map[string]bool{}
		for p, m := range v.Cluster.Owners {
			owners[p] = m.NodeID
			seen[m.NodeID] = true
		}
		all := len(owners) == v.Cluster.Partitions && len(seen) == len(want)
		for _, n := range want {
			all = all && seen[n]
		}
		if all {
			return owners
		}
		if time.Now().After(deadline) {
			t.Fatalf("owners %v after 60 s, want every partition owned by %v", owners, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// `ctl cluster` on a real two-node cluster: the nodes, which owns which
// partition, this node's lag; when a node stops, its partitions move and
// the command shows it.
func TestCtlClusterOnKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster on a real Kafka broker")
	}
	brokers := kafkatest.Brokers(t)
	name := fmt.Sprintf("ctl-%d", time.Now().UnixNano())
	b1, _ := startClusterNode(t, brokers, name, "n1")
	_, stop2 := startClusterNode(t, brokers, name, "n2")
	waitOwners(t, b1, "n1", "n2")

	// A command applied, so the owner has batches to show.
	resp, err := http.Post(b1+"/v1/event", "application/json", strings.NewReader(`{"eventName":"c","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":1,"colCount":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	out := ok(t, b1, nil, "cluster")
	if !regexp.MustCompile(`(?m)^Cluster:\s+`+name+`$`).MatchString(out) || !regexp.MustCompile(`(?m)^n1\s+127\.0\.0\.1:\d+\s+\d`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^n2\s+127\.0\.0\.1:\d+\s+\d`).MatchString(out) {
		t.Errorf("cluster:\n%s", out)
	}
	var ov opsOverview
	jsonLine(t, b1, &ov, "overview")
	served := 0
	for _, p := range ov.Partitions {
		if p.Served {
			served++
			if p.Owner != "n1" {
				t.Errorf("partition %d served here but owned by %q", p.Partition, p.Owner)
			}
		} else if p.Owner != "n2" {
			t.Errorf("partition %d: owner %q, want n2", p.Partition, p.Owner)
		}
	}
	if ov.Node.Mode != "cluster" || ov.Node.NodeID != "n1" || served == 0 || served == len(ov.Partitions) {
		t.Errorf("overview on n1: %+v", ov)
	}
	// The lag shows once Kafka has answered for a served partition: the
	// node asks at most once a second (cluster.LagRefresh), so a busy
	// machine may need a few refreshes.
	lagged := regexp.MustCompile(`(?m)^\d+\s+n1\s+.*\s\d+$`)
	for deadline := time.Now().Add(30 * time.Second); !lagged.MatchString(out) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		out = ok(t, b1, nil, "cluster")
	}
	if !lagged.MatchString(out) {
		t.Errorf("cluster: no lag for n1's partitions after 30 s:\n%s", out)
	}
	testOpsAcrossNodes(t, b1)

	stop2()
	owners := waitOwners(t, b1, "n1")
	out = ok(t, b1, nil, "cluster")
	if !regexp.MustCompile(`(?m)^n1\s+127\.0\.0\.1:\d+\s+0,1,2,3$`).MatchString(out) || strings.Contains(out, "\nn2 ") {
		t.Errorf("cluster after n2 stopped (owners %v):\n%s", owners, out)
	}
	b, _ := json.Marshal(owners)
	t.Logf("owners after n2 stopped: %s", b)
}

// The operator reads gather from every partition, so on a cluster their
// queries and answers cross to the other node: every one arrives whole.
func testOpsAcrossNodes(t *testing.T, base string) {
	post := func(path, body string, want int) map[string]any { return call(t, "POST", base+path, "", body, want) }
	for i := range 6 {
		post("/v1/event", fmt.Sprintf(`{"eventName":"x%d","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":1,"colCount":4},{"areaId":"B","price":1,"rowCount":1,"colCount":4}]}`, i), 200)
		post("/v2/reservations", fmt.Sprintf(`{"eventId":"x%d","areaId":"B","userId":"u","type":"RANDOM","numOfSeats":1}`, i), 201)
	}
	var evs opsEvents
	jsonLine(t, base, &evs, "event", "list", "--after", "w")
	if len(evs.Events) != 6 {
		t.Fatalf("event list over the cluster: %+v", evs)
	}
	for _, e := range evs.Events {
		if e.Seats != 8 || e.Sold != 1 {
			t.Errorf("event %s over the cluster: %+v", e.EventName, e)
		}
	}
	for i := range 6 {
		if out := ok(t, base, nil, "event", "seats", fmt.Sprintf("x%d", i), "B"); !strings.Contains(out, "   0  #...") {
			t.Errorf("seats of x%d/B:\n%s", i, out)
		}
	}
	cust := post("/api/customers", `{"email":"a@b.c","name":"Ann"}`, 201)["customerId"].(string)
	prod := post("/api/products", `{"sku":"S","name":"P","price":1.00,"quantityOnHand":100}`, 201)["productId"].(string)
	var ids []string
	for range 4 {
		id := post("/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cust, prod), 201)["orderId"].(string)
		if o := call(t, "GET", base+"/api/orders/"+id+"?wait=20s", "", "", 200); o["status"] != "CONFIRMED" {
			t.Fatalf("order over the cluster: %v", o)
		}
		ids = append(ids, id)
	}
	var orders opsOrders
	jsonLine(t, base, &orders, "order", "list", "--status", "CONFIRMED")
	if len(orders.Orders) != 4 {
		t.Errorf("order list over the cluster: %+v", orders)
	}
	for _, id := range ids {
		var tl opsTimeline
		jsonLine(t, base, &tl, "saga", "show", id)
		if tl.Status != "COMPLETED" || len(tl.Steps) < 3 || tl.DLQ != 0 {
			t.Errorf("saga %s over the cluster: %+v", id, tl)
		}
	}
	for i := range 6 {
		post(fmt.Sprintf("/v1/groups/q%d/messages", i), `{"id":"m","seq":2}`, 201)
	}
	var gs opsGroups
	jsonLine(t, base, &gs, "group", "list")
	if len(gs.Groups) != 6 {
		t.Errorf("group list over the cluster: %+v", gs)
	}
	for _, g := range gs.Groups {
		if g.Gap == nil || g.Gap.Seq != 1 || g.Gap.State != "unpublished" {
			t.Errorf("group %s over the cluster: %+v", g.Name, g)
		}
	}
	var qs opsQueues
	jsonLine(t, base, &qs, "queue", "latency")
	if len(qs.Queues) != 1 || qs.Queues[0].Name != "default" {
		t.Errorf("queue latency over the cluster: %+v", qs)
	}
}

package commerce_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/vfs"
	"github.com/surge-run/surge/internal/wal"
	"github.com/surge-run/surge/internal/workload/commerce"
)

// dlqCount reads GET /api/admin/dlq/count.
func dlqCount(t *testing.T, srv *httptest.Server) map[string]any {
	t.Helper()
	return must(t, srv, 200, "GET", "/api/admin/dlq/count", "")
}

// waitDLQ polls until cond holds of the count (generous: a busy machine).
func waitDLQ(t *testing.T, srv *httptest.Server, what string, cond func(map[string]any) bool) map[string]any {
	t.Helper()
	for giveUp := time.Now().Add(30 * time.Second); ; {
		c := dlqCount(t, srv)
		if cond(c) {
			return c
		}
		if time.Now().After(giveUp) {
			t.Fatalf("waiting for %s: %v", what, c)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func placeOrder(t *testing.T, srv *httptest.Server, cid, pid string, qty int) string {
	t.Helper()
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":%d,"unitPrice":"10.00"}]}`, cid, pid, qty))
	return o["orderId"].(string)
}

func countEvents(t *testing.T, srv *httptest.Server, path, typ, field, value string) int {
	t.Helper()
	n := 0
	for _, e := range mustList(t, srv, path+"?limit=1000") {
		if e["eventType"] == typ && (field == "" || e["data"].(map[string]any)[field] == value) {
			n++
		}
	}
	return n
}

// Fault on: the orders' sagas park their first step; the entries are
// counted, listed and read; replay is refused while the fault is on;
// fault off, each replay completes its saga, exactly once, and a second
// replay of the same entry finds nothing.
func TestDLQFaultParksAndReplayCompletesOnce(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 100)
	f := must(t, srv, 200, "POST", "/api/admin/fault?enabled=true&failureMessage=disk%20on%20fire", "")
	if f["enabled"] != true || f["failureMessage"] != "disk on fire" {
		t.Fatalf("fault: %v", f)
	}
	var orders []string
	for range 3 {
		orders = append(orders, placeOrder(t, srv, cid, pid, 2))
	}
	c := waitDLQ(t, srv, "3 parked", func(c map[string]any) bool { return c["count"] == 3.0 })
	if c["faultEnabled"] != true || c["parked"] != 3.0 {
		t.Fatalf("count: %v", c)
	}
	list := mustList(t, srv, "/api/admin/dlq")
	if len(list) != 3 {
		t.Fatalf("list: %v", list)
	}
	if l := mustList(t, srv, "/api/admin/dlq?limit=2"); len(l) != 2 || l[0]["id"] != list[0]["id"] {
		t.Fatalf("list limit 2: %v", l)
	}
	for _, e := range list {
		hasFields(t, e, "id", "eventType", "service", "sagaId", "orderId", "failureReason", "failedAt", "status", "payload")
		if e["eventType"] != "ReserveForOrder" || e["service"] != "inventory-service" || !strings.Contains(e["failureReason"].(string), "disk on fire") {
			t.Fatalf("entry: %v", e)
		}
		if got := must(t, srv, 200, "GET", "/api/admin/dlq/"+e["id"].(string), ""); got["orderId"] != e["orderId"] || got["status"] != "PARKED" {
			t.Fatalf("get: %v, listed %v", got, e)
		}
	}
	for _, id := range orders {
		if o := must(t, srv, 200, "GET", "/api/orders/"+id, ""); o["status"] != "PENDING" {
			t.Fatalf("order with a parked step: %v", o)
		}
	}
	id0 := list[0]["id"].(string)
	if st, b := do(t, srv, "POST", "/api/admin/dlq/"+id0+"/replay", ""); st != 409 || !strings.Contains(b, "enabled=false") {
		t.Fatalf("replay with the fault on: %d %s", st, b)
	}

	must(t, srv, 200, "POST", "/api/admin/fault?enabled=false", "")
	for _, e := range list {
		id := e["id"].(string)
		if r := must(t, srv, 200, "POST", "/api/admin/dlq/"+id+"/replay", ""); r["status"] != "REPLAYED" || r["id"] != id {
			t.Fatalf("replay: %v", r)
		}
		if st, b := do(t, srv, "POST", "/api/admin/dlq/"+id+"/replay", ""); st != 404 {
			t.Fatalf("second replay of %s: %d %s", id, st, b)
		}
	}
	for _, id := range orders {
		if o := waitOrder(t, srv, id); o["status"] != "CONFIRMED" {
			t.Fatalf("order after replay: %v", o)
		}
		if n := countEvents(t, srv, "/api/orders/"+id+"/events", "OrderStatusChanged", "to", "CONFIRMED"); n != 1 {
			t.Fatalf("order %s confirmed %d times", id, n)
		}
		if n := countEvents(t, srv, "/api/products/"+pid+"/events", "StockReserved", "orderId", id); n != 1 {
			t.Fatalf("order %s reserved %d times", id, n)
		}
		if p := must(t, srv, 200, "GET", "/api/payments/order/"+id, ""); p["status"] != "CAPTURED" {
			t.Fatalf("payment: %v", p)
		}
	}
	if p := must(t, srv, 200, "GET", "/api/products/"+pid, ""); p["availableQuantity"] != 94.0 {
		t.Fatalf("product after three orders of 2: %v", p)
	}
	c = dlqCount(t, srv)
	if c["count"] != 0.0 || c["replayed"] != 3.0 || c["faultEnabled"] != false {
		t.Fatalf("count after replay: %v", c)
	}
	if l := mustList(t, srv, "/api/admin/dlq"); len(l) != 0 {
		t.Fatalf("list after replay: %v", l)
	}
}

// A discarded entry is gone (404 after) and never applied: with the
// fault off its saga stays where it was, and a cancel then releases
// nothing because nothing was reserved.
func TestDLQDiscard(t *testing.T) {
	srv := newServer(t, time.Minute)
	cid, pid := seed(t, srv, "10.00", 10)
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=true", "")
	id := placeOrder(t, srv, cid, pid, 1)
	waitDLQ(t, srv, "1 parked", func(c map[string]any) bool { return c["count"] == 1.0 })
	e := mustList(t, srv, "/api/admin/dlq")[0]
	if e["failureReason"] != "fault injected: "+commerce.DefaultFaultMessage {
		t.Fatalf("entry: %v", e)
	}
	eid := e["id"].(string)
	if d := must(t, srv, 200, "DELETE", "/api/admin/dlq/"+eid, ""); d["status"] != "DISCARDED" {
		t.Fatalf("discard: %v", d)
	}
	for _, r := range [][2]string{{"GET", ""}, {"DELETE", ""}, {"POST", "/replay"}} {
		if st, b := do(t, srv, r[0], "/api/admin/dlq/"+eid+r[1], ""); st != 404 {
			t.Fatalf("%s %s after discard: %d %s", r[0], r[1], st, b)
		}
	}
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=false", "")
	if o := must(t, srv, 200, "GET", "/api/orders/"+id, ""); o["status"] != "PENDING" {
		t.Fatalf("order whose step was discarded: %v", o)
	}
	if n := countEvents(t, srv, "/api/products/"+pid+"/events", "StockReserved", "", ""); n != 0 {
		t.Fatalf("a discarded step reserved stock %d times", n)
	}
	must(t, srv, 200, "PATCH", "/api/orders/"+id+"/cancel", `{"reason":"stuck","cancelledBy":"ops"}`)
	if p := must(t, srv, 200, "GET", "/api/products/"+pid, ""); p["quantityReserved"] != 0.0 || p["availableQuantity"] != 10.0 {
		t.Fatalf("product: %v", p)
	}
	if c := dlqCount(t, srv); c["count"] != 0.0 || c["discarded"] != 1.0 || c["parked"] != 1.0 {
		t.Fatalf("count: %v", c)
	}
}

// The deadline of a saga whose step is parked compensates it, and the
// compensation drops the parked step (a later replay could otherwise
// reserve stock for a cancelled order).
func TestDLQDeadlineCompensatesParkedSaga(t *testing.T) {
	srv := newServer(t, time.Second)
	cid, pid := seed(t, srv, "10.00", 10)
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=true", "")
	id := placeOrder(t, srv, cid, pid, 3)
	if o := waitOrder(t, srv, id); o["status"] != "CANCELLED" {
		t.Fatalf("order: %v", o)
	}
	if s := must(t, srv, 200, "GET", "/api/sagas/"+id, ""); s["status"] != "TIMED_OUT" {
		t.Fatalf("saga: %v", s)
	}
	c := waitDLQ(t, srv, "the parked step dropped", func(c map[string]any) bool { return c["dropped"] == 1.0 })
	if c["count"] != 0.0 || c["parked"] != 1.0 || c["faultEnabled"] != true {
		t.Fatalf("count: %v", c)
	}
	if p := must(t, srv, 200, "GET", "/api/products/"+pid, ""); p["quantityReserved"] != 0.0 || p["availableQuantity"] != 10.0 {
		t.Fatalf("product: %v", p)
	}
	if n := countEvents(t, srv, "/api/products/"+pid+"/events", "StockReserved", "", ""); n != 0 {
		t.Fatalf("%d reservations for a parked step", n)
	}
}

func TestAdminBadInput(t *testing.T) {
	srv := newServer(t, time.Minute)
	_, pid := seed(t, srv, "10.00", 10)
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/admin/fault"},
		{"POST", "/api/admin/fault?enabled=maybe"},
		{"POST", "/api/admin/fault?enabled=true&failureMessage=" + strings.Repeat("x", commerce.MaxTextLen+1)},
		{"GET", "/api/admin/dlq?limit=0"},
		{"GET", "/api/admin/dlq?limit=x"},
		{"GET", "/api/products/" + pid + "/similar?limit=-1"},
	} {
		if st, b := do(t, srv, c.method, c.path, ""); st != 400 || !strings.Contains(b, `"error"`) {
			t.Fatalf("%s %s: %d %s", c.method, c.path, st, b)
		}
	}
	for _, id := range []string{"nope", "dlq-0-0", "dlq-99-0", "dlq-1-x", "dlq--1-0"} {
		for _, m := range [][2]string{{"GET", ""}, {"DELETE", ""}, {"POST", "/replay"}} {
			if st, b := do(t, srv, m[0], "/api/admin/dlq/"+id+m[1], ""); st != 404 {
				t.Fatalf("%s %s%s: %d %s", m[0], id, m[1], st, b)
			}
		}
	}
	if c := dlqCount(t, srv); c["count"] != 0.0 || c["faultEnabled"] != false {
		t.Fatalf("bad input changed something: %v", c)
	}
}

func TestSimilarProducts(t *testing.T) {
	srv := newServer(t, time.Minute)
	_, pid := seed(t, srv, "10.00", 10)
	s := must(t, srv, 200, "GET", "/api/products/"+pid+"/similar?limit=5", "")
	hasFields(t, s, "vectorStoreAvailable", "implementation", "message", "similarProducts")
	if s["vectorStoreAvailable"] != false || s["implementation"] == "" || s["message"] == "" {
		t.Fatalf("similar: %v", s)
	}
	if l, ok := s["similarProducts"].([]any); !ok || len(l) != 0 {
		t.Fatalf("similarProducts: %v", s["similarProducts"])
	}
	if st, b := do(t, srv, "GET", "/api/products/nope/similar", ""); st != 404 {
		t.Fatalf("unknown product: %d %s", st, b)
	}
}

// restartable is a commerce server over a log and snapshots in dir that
// a test can stop and start again.
type restartable struct {
	t   *testing.T
	dir string
	eng *engine.Engine
	srv *httptest.Server
	reg *prometheus.Registry
}

func (s *restartable) start() *httptest.Server {
	s.t.Helper()
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(s.dir, "wal"), Partitions: 4})
	if err != nil {
		s.t.Fatal(err)
	}
	snaps, err := wal.OpenSnapshotDir(vfs.OS, filepath.Join(s.dir, "snap"))
	if err != nil {
		s.t.Fatal(err)
	}
	hub := commerce.NewHub(0)
	s.eng, err = engine.Open(engine.Options{Partitions: 4, Log: lg, Snapshots: snaps,
		Logger: slog.New(slog.DiscardHandler),
		Notify: func(_ int, wl uint8, v any) {
			if wl == commerce.WorkloadID {
				hub.Notify(v)
			}
		}}, commerce.Workload{})
	if err != nil {
		s.t.Fatal(err)
	}
	mux := http.NewServeMux()
	capi := commerce.NewAPI(s.eng, hub).SetSagaDeadline(time.Hour)
	s.reg = prometheus.NewRegistry()
	capi.Register(mux, api.NewMetrics(s.reg))
	s.reg.MustRegister(capi.DLQCollector())
	s.srv = httptest.NewServer(mux)
	s.t.Cleanup(s.stop)
	return s.srv
}

func (s *restartable) stop() {
	if s.srv != nil {
		s.srv.Close()
		s.eng.Close()
		s.srv = nil
	}
}

func (s *restartable) metric(name, label string) float64 {
	s.t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				if g := m.GetGauge(); g != nil {
					return g.GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	s.t.Fatalf("metric %s{%s} not found", name, label)
	return 0
}

// The queue and the fault switch survive a restart from snapshots and one
// from the log alone, and a replay after the restarts completes the saga
// once; after another restart the entry stays gone and nothing is
// applied again.
func TestDLQSurvivesRestart(t *testing.T) {
	s := &restartable{t: t, dir: t.TempDir()}
	srv := s.start()
	cid, pid := seed(t, srv, "10.00", 10)
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=true&failureMessage=boom", "")
	id := placeOrder(t, srv, cid, pid, 2)
	waitDLQ(t, srv, "1 parked", func(c map[string]any) bool { return c["count"] == 1.0 })
	entry := mustList(t, srv, "/api/admin/dlq")[0]
	if s.metric("surge_commerce_dlq_entries", "") != 1 || s.metric("surge_commerce_dlq_total", "parked") != 1 || s.metric("surge_commerce_fault_injection_enabled", "") != 1 {
		t.Fatal("metrics do not show the parked entry and the fault")
	}
	check := func(how string) {
		t.Helper()
		got := must(t, srv, 200, "GET", "/api/admin/dlq/"+entry["id"].(string), "")
		if got["orderId"] != id || got["failureReason"] != entry["failureReason"] || got["failedAt"] != entry["failedAt"] {
			t.Fatalf("after a restart from %s: %v, before %v", how, got, entry)
		}
		if c := dlqCount(t, srv); c["count"] != 1.0 || c["faultEnabled"] != true {
			t.Fatalf("after a restart from %s: %v", how, c)
		}
	}

	s.stop() // a graceful stop snapshots every partition
	srv = s.start()
	check("snapshots")

	s.stop()
	snaps, _ := filepath.Glob(filepath.Join(s.dir, "snap", "*"))
	if len(snaps) == 0 {
		t.Fatal("no snapshot to remove")
	}
	for _, f := range snaps {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	srv = s.start()
	check("the log alone")

	must(t, srv, 200, "POST", "/api/admin/fault?enabled=false", "")
	must(t, srv, 200, "POST", "/api/admin/dlq/"+entry["id"].(string)+"/replay", "")
	if o := waitOrder(t, srv, id); o["status"] != "CONFIRMED" {
		t.Fatalf("order: %v", o)
	}
	s.stop()
	srv = s.start()
	if st, _ := do(t, srv, "GET", "/api/admin/dlq/"+entry["id"].(string), ""); st != 404 {
		t.Fatalf("replayed entry after a restart: %d", st)
	}
	if c := dlqCount(t, srv); c["count"] != 0.0 || c["replayed"] != 1.0 || c["faultEnabled"] != false {
		t.Fatalf("count after the last restart: %v", c)
	}
	if n := countEvents(t, srv, "/api/products/"+pid+"/events", "StockReserved", "orderId", id); n != 1 {
		t.Fatalf("reserved %d times", n)
	}
	if p := must(t, srv, 200, "GET", "/api/products/"+pid, ""); p["availableQuantity"] != 8.0 {
		t.Fatalf("product: %v", p)
	}
}

const dlqChildDir = "SURGE_DLQ_TEST_CHILD_DIR"

// dlqChild serves the commerce API over the log in dir until its stdin
// closes or it is killed; it prints "ADDR host:port" once serving.
func dlqChild(dir string) {
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Partitions: 4})
	if err != nil {
		panic(err)
	}
	snaps, err := wal.OpenSnapshotDir(vfs.OS, filepath.Join(dir, "snap"))
	if err != nil {
		panic(err)
	}
	hub := commerce.NewHub(0)
	eng, err := engine.Open(engine.Options{Partitions: 4, Log: lg, Snapshots: snaps, Logger: slog.New(slog.DiscardHandler),
		Notify: func(_ int, wl uint8, v any) {
			if wl == commerce.WorkloadID {
				hub.Notify(v)
			}
		}}, commerce.Workload{})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	commerce.NewAPI(eng, hub).SetSagaDeadline(time.Hour).Register(mux, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go http.Serve(ln, mux)
	fmt.Println("ADDR " + ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	eng.Close()
}

// startDLQChild runs dlqChild in a child process and returns a server
// handle for the helpers and the child, to kill.
func startDLQChild(t *testing.T, dir string) (*httptest.Server, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDLQReplayAcrossKill9$")
	cmd.Env = append(os.Environ(), dlqChildDir+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("child stderr: %s", stderr.String())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return &httptest.Server{URL: "http://" + a}, cmd
	case <-time.After(60 * time.Second):
		t.Fatalf("child did not start: %s", stderr.String())
	}
	return nil, nil
}

// A replay that answered 200 is processed exactly once even when the
// process is SIGKILLed at once (the saga's later messages still in
// flight) and the log is replayed: the order ends CONFIRMED, reserved
// once and paid once, and the entry stays gone.
func TestDLQReplayAcrossKill9(t *testing.T) {
	if dir := os.Getenv(dlqChildDir); dir != "" {
		dlqChild(dir)
		return
	}
	dir := t.TempDir()
	srv, child := startDLQChild(t, dir)
	cid, pid := seed(t, srv, "10.00", 10)
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=true", "")
	id := placeOrder(t, srv, cid, pid, 2)
	waitDLQ(t, srv, "1 parked", func(c map[string]any) bool { return c["count"] == 1.0 })
	eid := mustList(t, srv, "/api/admin/dlq")[0]["id"].(string)
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=false", "")
	must(t, srv, 200, "POST", "/api/admin/dlq/"+eid+"/replay", "")
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()

	srv, _ = startDLQChild(t, dir)
	if o := waitOrder(t, srv, id); o["status"] != "CONFIRMED" {
		t.Fatalf("order after kill -9: %v", o)
	}
	if st, b := do(t, srv, "POST", "/api/admin/dlq/"+eid+"/replay", ""); st != 404 {
		t.Fatalf("replay after kill -9: %d %s", st, b)
	}
	if c := dlqCount(t, srv); c["count"] != 0.0 || c["replayed"] != 1.0 || c["parked"] != 1.0 {
		t.Fatalf("count after kill -9: %v", c)
	}
	if n := countEvents(t, srv, "/api/products/"+pid+"/events", "StockReserved", "orderId", id); n != 1 {
		t.Fatalf("reserved %d times", n)
	}
	if p := must(t, srv, 200, "GET", "/api/payments/order/"+id, ""); p["status"] != "CAPTURED" || p["amount"] != 22.0 {
		t.Fatalf("payment: %v", p)
	}
	if p := must(t, srv, 200, "GET", "/api/products/"+pid, ""); p["availableQuantity"] != 8.0 {
		t.Fatalf("product: %v", p)
	}
}

package commerce_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/promtest"
	"github.com/surge-run/surge/internal/workload/commerce"
)

// metricsServer is newServer with the saga metrics fed by the notes and
// registered with the stock collector, as the module does: embedded, or
// (clustered) a node that serves no partition.
func metricsServer(t *testing.T, deadline time.Duration, clustered bool) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	hub, sagas := commerce.NewHub(0), commerce.NewSagaMetrics()
	opts := engine.Options{Partitions: 4, Notify: func(p int, wl uint8, v any) {
		if wl == commerce.WorkloadID {
			sagas.Note(p, v)
			hub.Notify(v)
		}
	}}
	var eng *engine.Engine
	if clustered {
		eng = enginetest.Forwarding(t, opts, commerce.Workload{})
		sagas.CountOnlyServed(eng.Serves)
	} else {
		eng = enginetest.OpenEngine(t, t.TempDir(), opts, commerce.Workload{})
	}
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	capi := commerce.NewAPI(eng, hub).SetSagaDeadline(deadline)
	capi.Register(mux, api.NewMetrics(reg))
	reg.MustRegister(capi.StockCollector(), sagas.Collector())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { capi.Shutdown(); srv.Close() })
	return srv, reg
}

// gathered finds the series of name whose labels include want.
func gathered(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Metric {
	t.Helper()
	var pairs []string
	for k, v := range want {
		pairs = append(pairs, k, v)
	}
	m := promtest.Series(t, reg, name, promtest.Labeled(pairs...))
	if m == nil {
		t.Fatalf("no series %s%v", name, want)
	}
	return m
}

func sagasEnded(t *testing.T, reg *prometheus.Registry, outcome string) (uint64, float64) {
	h := gathered(t, reg, "surge_commerce_saga_seconds", map[string]string{"outcome": outcome}).GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// Each ended saga is counted once under its outcome, timed from its
// order's creation to its end: one confirmed, two compensated (payment
// declined, stock short), one timed out (its reservation parked by fault
// injection) whose time is at least the deadline. The stock gauges
// read the products' units.
func TestSagaMetricsByOutcome(t *testing.T) {
	const deadline = 3 * time.Second
	srv, reg := metricsServer(t, deadline, false)
	cid, pid := seed(t, srv, "20000.00", 5)
	cheap := must(t, srv, 201, "POST", "/api/products", `{"sku":"SKU-2","name":"Pen","price":1,"quantityOnHand":10}`)["productId"].(string)
	order := func(product string, qty int) string {
		o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":%d}]}`, cid, product, qty))
		return waitOrder(t, srv, o["orderId"].(string))["status"].(string)
	}
	if st := order(cheap, 2); st != "CONFIRMED" {
		t.Fatalf("the cheap order is %s", st)
	}
	if st := order(pid, 1); st != "CANCELLED" {
		t.Fatalf("the declined order is %s", st)
	}
	if st := order(cheap, 100); st != "CANCELLED" {
		t.Fatalf("the order beyond the stock is %s", st)
	}
	must(t, srv, 200, "POST", "/api/admin/fault?enabled=true", "")
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, cheap))
	if st := must(t, srv, 200, "GET", "/api/orders/"+o["orderId"].(string)+"?wait=20s", "")["status"]; st != "CANCELLED" {
		t.Fatalf("the parked order is %s after its deadline", st)
	}
	// The long poll returns on the note, which the metrics took first.
	for outcome, want := range map[string]uint64{"completed": 1, "compensated": 2, "timed_out": 1, "failed": 0} {
		if n, _ := sagasEnded(t, reg, outcome); n != want {
			t.Errorf("%s sagas: %d, want %d", outcome, n, want)
		}
	}
	if _, sum := sagasEnded(t, reg, "timed_out"); sum < deadline.Seconds() {
		t.Errorf("the timed-out saga lasted %.3fs, less than its deadline %v", sum, deadline)
	}
	for state, want := range map[string]float64{"on_hand": 15, "reserved": 2, "available": 13} {
		if v := gathered(t, reg, "surge_commerce_stock_units", map[string]string{"state": state}).GetGauge().GetValue(); v != want {
			t.Errorf("stock %s: %v, want %v", state, v, want)
		}
	}
	if v := gathered(t, reg, "surge_commerce_sagas_running", nil).GetGauge().GetValue(); v != 0 {
		t.Errorf("sagas running: %v, want 0", v)
	}
}

// A cluster node receives the notes of partitions other nodes serve (its
// long polls wait on them) but counts none of them: the node that serves
// the order's partition does, so the sum over nodes counts each once.
func TestSagaMetricsCountOnlyServedPartitions(t *testing.T) {
	srv, reg := metricsServer(t, time.Minute, true)
	cid, pid := seed(t, srv, "1.00", 5)
	o := must(t, srv, 201, "POST", "/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, cid, pid))
	if st := waitOrder(t, srv, o["orderId"].(string))["status"]; st != "CONFIRMED" {
		t.Fatalf("order %s", st)
	}
	if n, _ := sagasEnded(t, reg, "completed"); n != 0 {
		t.Fatalf("a node serving no partition counted %d sagas", n)
	}
}

// Counting a note allocates nothing: it runs on the log's completion
// goroutine for every saga.
func TestSagaMetricsNoteAllocatesNothing(t *testing.T) {
	m := commerce.NewSagaMetrics()
	var note any = commerce.OrderChanged{OrderID: "o", Status: commerce.OrderConfirmed, SagaStatus: commerce.SagaCompleted, StartedAt: 1, EndedAt: 2e6}
	if n := testing.AllocsPerRun(100, func() { m.Note(0, note) }); n != 0 {
		t.Fatalf("Note allocates %v times", n)
	}
}

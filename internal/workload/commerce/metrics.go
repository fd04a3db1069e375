package commerce

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsScrapeTimeout bounds the queries one scrape makes of the
// partitions; a busy engine leaves the stock series out of that scrape.
const metricsScrapeTimeout = 2 * time.Second

// sagaSecondsBuckets cover a saga from a few group commits to well past
// the default deadline (DefaultDeadline).
var sagaSecondsBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Saga outcomes as labelled: the terminal statuses, in lower case.
var sagaOutcomes = [...]struct{ status, label string }{
	{SagaCompleted, "completed"}, {SagaCompensated, "compensated"}, {SagaTimedOut, "timed_out"}, {SagaFailed, "failed"},
}

// SagaMetrics counts ended sagas by outcome and times them from the
// order's creation to the end of its saga, both logged times. It reads
// the OrderChanged notes, which the engine hands over once the ending
// command is durable, after the partition's loop, and which replay never
// produces: nothing here is logged or changes what is. A node of a
// cluster also receives the notes of partitions other nodes serve (for
// its long polls); it counts only those of the partitions it serves, so
// that summing over nodes counts each saga once.
type SagaMetrics struct {
	seconds  *prometheus.HistogramVec
	outcomes [len(sagaOutcomes)]prometheus.Observer
	serves   atomic.Pointer[func(int) bool]
}

// NewSagaMetrics returns the saga histogram with a series per outcome.
func NewSagaMetrics() *SagaMetrics {
	m := &SagaMetrics{seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "surge_commerce_saga_seconds",
		Help:    "Order sagas ended, by outcome (completed, compensated, timed_out, failed), and their time from the order's creation to the saga's end (logged times); _count is the sagas ended.",
		Buckets: sagaSecondsBuckets,
	}, []string{"outcome"})}
	for i, o := range sagaOutcomes {
		m.outcomes[i] = m.seconds.WithLabelValues(o.label)
	}
	return m
}

// CountOnlyServed makes the metrics count only the notes of partitions
// serves reports true for (a cluster node: the partitions it serves).
func (m *SagaMetrics) CountOnlyServed(serves func(int) bool) { m.serves.Store(&serves) }

// Note takes a commerce note; it never blocks and allocates nothing.
func (m *SagaMetrics) Note(partition int, v any) {
	oc, ok := v.(OrderChanged)
	if !ok || oc.EndedAt == 0 {
		return // a note of an older node, without the times
	}
	if s := m.serves.Load(); s != nil && !(*s)(partition) {
		return
	}
	for i, o := range sagaOutcomes {
		if o.status == oc.SagaStatus {
			m.outcomes[i].Observe(float64(max(oc.EndedAt-oc.StartedAt, 0)) / 1e9)
			return
		}
	}
}

// Collector is what to register on the server's registry.
func (m *SagaMetrics) Collector() prometheus.Collector { return m.seconds }

// orderEnded is the note of an order whose saga ended at now.
func orderEnded(o *Order, s *Saga, now int64) OrderChanged {
	return OrderChanged{OrderID: o.ID, Status: o.Status, SagaStatus: s.Status, StartedAt: s.StartedAt, EndedAt: now}
}

// StockGauges asks a partition for its stock and running sagas
// (*StockTotals).
type StockGauges struct{}

// StockTotals are a partition's stock units and running sagas.
type StockTotals struct {
	Products, OnHand, Reserved, SagasRunning int64
}

func (m *Machine) queryGauges(q any) (any, bool) {
	if _, ok := q.(*StockGauges); !ok {
		return nil, false
	}
	t := &StockTotals{Products: int64(len(m.products))}
	for _, p := range m.products {
		t.OnHand += p.OnHand
		t.Reserved += p.Reserved
	}
	for _, s := range m.sagas {
		if !s.Terminal() {
			t.SagasRunning++
		}
	}
	return t, true
}

// StockCollector exports the stock and running sagas of every partition
// at each scrape (register it on the server's registry).
func (a *API) StockCollector() prometheus.Collector { return stockCollector{a} }

type stockCollector struct{ a *API }

var (
	stockUnitsDesc = prometheus.NewDesc("surge_commerce_stock_units",
		"Stock units over all products: on_hand (quantityOnHand), reserved (held for orders), available (on_hand − reserved).", []string{"state"}, nil)
	productsDesc     = prometheus.NewDesc("surge_commerce_products", "Products held.", nil, nil)
	sagasRunningDesc = prometheus.NewDesc("surge_commerce_sagas_running", "Order sagas started and not yet ended.", nil, nil)
)

func (c stockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stockUnitsDesc
	ch <- productsDesc
	ch <- sagasRunningDesc
}

func (c stockCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	parts, err := fanout[*StockTotals](ctx, c.a, &StockGauges{})
	if err != nil {
		return // a busy or failed engine: the scrape goes on without these
	}
	var t StockTotals
	for _, p := range parts {
		t.Products += p.Products
		t.OnHand += p.OnHand
		t.Reserved += p.Reserved
		t.SagasRunning += p.SagasRunning
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(stockUnitsDesc, t.OnHand, "on_hand")
	gauge(stockUnitsDesc, t.Reserved, "reserved")
	gauge(stockUnitsDesc, t.OnHand-t.Reserved, "available")
	gauge(productsDesc, t.Products)
	gauge(sagasRunningDesc, t.SagasRunning)
}

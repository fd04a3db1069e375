package commerce

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// The operational routes of the commerce peer: its dead-letter queue,
// fault injection and the similar-products route (see dlq.go).

const (
	// defaultDLQLimit is GET /api/admin/dlq's page without ?limit=.
	defaultDLQLimit = 100
	// dlqScrapeTimeout bounds how long a /metrics scrape waits for the
	// partitions' dead-letter counters; past it they are left out.
	dlqScrapeTimeout = 2 * time.Second
	// SimilarImplementation names what answers /api/products/{id}/similar.
	SimilarImplementation = "none"
)

func (a *API) registerAdmin(mux *http.ServeMux, m routes) {
	m.Handle(mux, "GET /api/admin/dlq", a.listDLQ)
	m.Handle(mux, "GET /api/admin/dlq/{$}", a.listDLQ)
	m.Handle(mux, "GET /api/admin/dlq/count", a.countDLQ)
	m.Handle(mux, "GET /api/admin/dlq/{id}", a.getDLQ)
	m.Handle(mux, "POST /api/admin/dlq/{id}/replay", a.replayDLQ)
	m.Handle(mux, "DELETE /api/admin/dlq/{id}", a.discardDLQ)
	m.Handle(mux, "POST /api/admin/fault", a.setFault)
	m.Handle(mux, "GET /api/products/{id}/similar", a.similarProducts)
}

type dlqEntryDTO struct {
	ID            string         `json:"id"`
	EventType     string         `json:"eventType"`
	Service       string         `json:"service"`
	SagaID        string         `json:"sagaId"`
	OrderID       string         `json:"orderId"`
	FailureReason string         `json:"failureReason"`
	FailedAt      string         `json:"failedAt"`
	Partition     int            `json:"partition"`
	Status        string         `json:"status"`
	Payload       map[string]any `json:"payload"`
}

// dlqOut describes an entry; status is PARKED, REPLAYED or DISCARDED.
func dlqOut(e *DLQEntry, status string) dlqEntryDTO {
	part, _, _ := ParseDLQID(e.ID)
	d := dlqEntryDTO{ID: e.ID, SagaID: e.OrderID, OrderID: e.OrderID, FailureReason: e.Cause,
		FailedAt: stamp(e.FailedAt), Partition: part, Status: status}
	cmd, err := Decode(e.Data)
	if err != nil {
		d.EventType, d.Payload = "undecodable", map[string]any{"error": err.Error()}
		return d
	}
	switch c := cmd.(type) {
	case *ReserveForOrder:
		d.EventType, d.Service = "ReserveForOrder", "inventory-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "productId": c.ProductID, "quantity": c.Quantity}
	case *StockReserved:
		d.EventType, d.Service = "StockReserved", "order-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "productId": c.ProductID}
	case *StockFailed:
		d.EventType, d.Service = "StockReservationFailed", "order-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "productId": c.ProductID, "reason": c.Reason}
	case *ProcessPaymentForOrder:
		d.EventType, d.Service = "ProcessPaymentForOrder", "payment-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "customerId": c.CustomerID, "amount": Money(c.AmountCents), "method": c.Method}
	case *PaymentProcessed:
		d.EventType, d.Service = "PaymentProcessed", "order-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "paymentId": c.PaymentID}
	case *PaymentFailed:
		d.EventType, d.Service = "PaymentFailed", "order-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "reason": c.Reason}
	case *CustomerVerified:
		d.EventType, d.Service = "CustomerVerified", "order-service"
		d.Payload = map[string]any{"orderId": c.OrderID, "customerId": c.CustomerID, "reason": c.Reason}
	}
	return d
}

// dlqID reads the path's entry id and its partition; an id no partition
// of this server could have issued is simply not found.
func (a *API) dlqID(w http.ResponseWriter, r *http.Request) (string, int, int) {
	id, ok := pathID(r, "id")
	part, _, ok2 := ParseDLQID(id)
	if !ok || !ok2 || part >= a.eng.Partitions() {
		return "", 0, notFound(w, "dead-letter entry", id)
	}
	return id, part, 0
}

// listDLQ gathers every partition's oldest entries and answers the
// oldest limit of them, oldest first.
func (a *API) listDLQ(w http.ResponseWriter, r *http.Request) int {
	limit, st := parseLimit(w, r, defaultDLQLimit)
	if st != 0 {
		return st
	}
	parts, err := fanout[[]DLQEntry](r.Context(), a, &ListDLQ{Limit: limit})
	if err != nil {
		return engineError(w, err)
	}
	var all []DLQEntry
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(x, y DLQEntry) int {
		return cmp.Or(cmp.Compare(x.FailedAt, y.FailedAt), cmp.Compare(x.ID, y.ID))
	})
	out := make([]dlqEntryDTO, 0, min(limit, len(all)))
	for i := range all[:min(limit, len(all))] {
		out = append(out, dlqOut(&all[i], "PARKED"))
	}
	return writeJSON(w, http.StatusOK, out)
}

type dlqCountDTO struct {
	Count        int    `json:"count"`
	FaultEnabled bool   `json:"faultEnabled"`
	Parked       uint64 `json:"parked"`
	Replayed     uint64 `json:"replayed"`
	Discarded    uint64 `json:"discarded"`
	Evicted      uint64 `json:"evicted"`
	Dropped      uint64 `json:"dropped"`
}

// dlqTotals adds up the partitions' counters.
func (a *API) dlqTotals(ctx context.Context) (dlqCountDTO, error) {
	parts, err := fanout[*DLQStats](ctx, a, &StatsDLQ{})
	if err != nil {
		return dlqCountDTO{}, err
	}
	var t dlqCountDTO
	for _, s := range parts {
		t.Count += s.Count
		t.FaultEnabled = t.FaultEnabled || s.Fault
		t.Parked += s.Parked
		t.Replayed += s.Replayed
		t.Discarded += s.Discarded
		t.Evicted += s.Evicted
		t.Dropped += s.Dropped
	}
	return t, nil
}

func (a *API) countDLQ(w http.ResponseWriter, r *http.Request) int {
	t, err := a.dlqTotals(r.Context())
	if err != nil {
		return engineError(w, err)
	}
	return writeJSON(w, http.StatusOK, t)
}

func (a *API) getDLQ(w http.ResponseWriter, r *http.Request) int {
	_, _, e, st := a.dlqEntry(w, r)
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, dlqOut(e, "PARKED"))
}

// dlqEntry reads the entry the path names from its partition; st is the
// status already answered if there is none.
func (a *API) dlqEntry(w http.ResponseWriter, r *http.Request) (id string, part int, e *DLQEntry, st int) {
	id, part, st = a.dlqID(w, r)
	if st != 0 {
		return "", 0, nil, st
	}
	e, err := engine.Query[*DLQEntry](r.Context(), a.eng, part, WorkloadID, &GetDLQ{ID: id})
	if err != nil {
		return "", 0, nil, engineError(w, err)
	}
	if e == nil {
		return "", 0, nil, notFound(w, "dead-letter entry", id)
	}
	return id, part, e, 0
}

// dlqChange applies a replay or discard of the entry in the path, and
// answers the entry as it was, with status.
func (a *API) dlqChange(w http.ResponseWriter, r *http.Request, status string, cmd func(id string) engine.Command) int {
	// Read first, only to describe it: the logged command decides.
	id, part, e, st := a.dlqEntry(w, r)
	if st != 0 {
		return st
	}
	res, err := engine.Do[*Result](r.Context(), a.eng, part, WorkloadID, cmd(id))
	if err != nil {
		return engineError(w, err)
	}
	if st := refused(w, res); st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, dlqOut(e, status))
}

func (a *API) replayDLQ(w http.ResponseWriter, r *http.Request) int {
	return a.dlqChange(w, r, "REPLAYED", func(id string) engine.Command { return &ReplayDLQ{ID: id} })
}

func (a *API) discardDLQ(w http.ResponseWriter, r *http.Request) int {
	return a.dlqChange(w, r, "DISCARDED", func(id string) engine.Command { return &DiscardDLQ{ID: id} })
}

// setFault switches fault injection in every partition, one logged
// SetFault each. A failure part way leaves the partitions already
// switched as they are; the answer says so and a retry finishes the job.
func (a *API) setFault(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	on, err := strconv.ParseBool(q.Get("enabled"))
	if err != nil {
		return api.Error(w, http.StatusBadRequest, "enabled must be true or false, got "+api.Quote(q.Get("enabled")))
	}
	msg := q.Get("failureMessage")
	if len([]rune(msg)) > MaxTextLen || api.CheckText(msg) != "" {
		return api.Error(w, http.StatusBadRequest, "failureMessage must be printable text of at most "+strconv.Itoa(MaxTextLen)+" characters")
	}
	cmd := &SetFault{Enabled: on, Message: msg}
	for p := range a.eng.Partitions() {
		res, err := engine.Do[*Result](r.Context(), a.eng, p, WorkloadID, cmd)
		if err != nil {
			return engineError(w, err)
		}
		if st := refused(w, res); st != 0 {
			return st
		}
	}
	if msg == "" && on {
		msg = DefaultFaultMessage
	}
	body := map[string]any{"enabled": on, "partitions": a.eng.Partitions()}
	if on {
		body["failureMessage"] = msg
	} else {
		body["failureMessage"] = nil
	}
	return writeJSON(w, http.StatusOK, body)
}

// similarProducts answers as the peer's community edition does: there is
// no vector store, so no similar products, for a product that exists.
func (a *API) similarProducts(w http.ResponseWriter, r *http.Request) int {
	id, ok := pathID(r, "id")
	if !ok {
		return notFound(w, "product", id)
	}
	limit, st := parseLimit(w, r, 10)
	if st != 0 {
		return st
	}
	p, err := query[*Product](r.Context(), a, ProductKey(id), &GetProduct{ID: id})
	if err != nil {
		return engineError(w, err)
	}
	if p == nil {
		return notFound(w, "product", id)
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"productId":            id,
		"limit":                limit,
		"vectorStoreAvailable": false,
		"implementation":       SimilarImplementation,
		"message":              "similarity search is not available: this server has no vector store",
		"similarProducts":      []any{},
	})
}

// DLQCollector exports the dead-letter counters of every partition at
// each scrape (register it on the server's registry).
func (a *API) DLQCollector() prometheus.Collector { return dlqCollector{a} }

type dlqCollector struct{ a *API }

var (
	dlqEntriesDesc = prometheus.NewDesc("surge_commerce_dlq_entries", "Saga messages parked in the commerce dead-letter queue, over all partitions.", nil, nil)
	dlqFaultDesc   = prometheus.NewDesc("surge_commerce_fault_injection_enabled", "1 while commerce fault injection is on in any partition.", nil, nil)
	dlqEventsDesc  = prometheus.NewDesc("surge_commerce_dlq_total", "Dead-letter entries by what happened to them: parked, replayed, discarded (by an operator), evicted (oldest, past the per-partition limit), dropped (their saga ended).", []string{"event"}, nil)
)

func (c dlqCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dlqEntriesDesc
	ch <- dlqFaultDesc
	ch <- dlqEventsDesc
}

func (c dlqCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), dlqScrapeTimeout)
	defer cancel()
	t, err := c.a.dlqTotals(ctx)
	if err != nil {
		return // a busy or failed engine: the scrape goes on without these
	}
	fault := 0.0
	if t.FaultEnabled {
		fault = 1
	}
	ch <- prometheus.MustNewConstMetric(dlqEntriesDesc, prometheus.GaugeValue, float64(t.Count))
	ch <- prometheus.MustNewConstMetric(dlqFaultDesc, prometheus.GaugeValue, fault)
	for _, e := range []struct {
		name string
		v    uint64
	}{{"parked", t.Parked}, {"replayed", t.Replayed}, {"discarded", t.Discarded}, {"evicted", t.Evicted}, {"dropped", t.Dropped}} {
		ch <- prometheus.MustNewConstMetric(dlqEventsDesc, prometheus.CounterValue, float64(e.v), e.name)
	}
}

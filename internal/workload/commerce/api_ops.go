package commerce

import (
	"iter"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/surge-run/surge/internal/api"
)

// Operator reads (docs/API.md, Operator reads): orders paged and filtered
// on the server, and a saga as a timeline.

// Orders page sizes.
const (
	DefaultOrdersPage = 50
	MaxOrdersPage     = 200
)

// OpsOrders asks a partition for its orders with an id above After that
// match Status and CustomerID ("" matches any), at most Limit, by id.
type OpsOrders struct {
	After, Status, CustomerID string
	Limit                     int
}

// SagaDLQ asks a partition how many of its dead letters belong to the
// order's saga.
type SagaDLQ struct{ OrderID string }

// A SagaDLQ answer is an int.
func opsWireTypes() []any { return []any{&OpsOrders{}, &SagaDLQ{}, 0} }

// queryOps answers the operator reads' queries.
func (m *Machine) queryOps(q any) (any, bool) {
	switch q := q.(type) {
	case *OpsOrders:
		ids := api.Smallest(m.matchingOrders(q), q.After, q.Limit)
		out := make([]Order, len(ids))
		for i, id := range ids {
			out[i] = *m.orders[id].copy()
		}
		return out, true
	case *SagaDLQ:
		n := 0
		for _, e := range m.dlq.entries {
			if e.OrderID == q.OrderID {
				n++
			}
		}
		return n, true
	}
	return nil, false
}

func (m *Machine) matchingOrders(q *OpsOrders) iter.Seq[string] {
	if q.Status == "" && q.CustomerID == "" {
		return maps.Keys(m.orders)
	}
	return func(yield func(string) bool) {
		for id, o := range m.orders {
			if (q.Status == "" || o.Status == q.Status) && (q.CustomerID == "" || o.CustomerID == q.CustomerID) && !yield(id) {
				return
			}
		}
	}
}

func (a *API) registerOps(mux *http.ServeMux, m routes) {
	m.Handle(mux, "GET /api/ops/orders", a.opsOrders)
	m.Handle(mux, "GET /api/ops/sagas/{id}", a.sagaTimeline)
}

var orderStatuses = []string{OrderPending, OrderConfirmed, OrderCancelled}

func (a *API) opsOrders(w http.ResponseWriter, r *http.Request) int {
	p, ok := api.ParsePage(w, r, DefaultOrdersPage, MaxOrdersPage, MaxTextLen)
	if !ok {
		return http.StatusBadRequest
	}
	q := &OpsOrders{After: p.After, Limit: p.Limit + 1, Status: r.URL.Query().Get("status"), CustomerID: r.URL.Query().Get("customerId")}
	if q.Status != "" && !slices.Contains(orderStatuses, q.Status) {
		return api.Error(w, http.StatusBadRequest, "status must be one of "+strings.Join(orderStatuses, ", ")+", got "+api.Quote(q.Status))
	}
	for name, v := range map[string]string{"after": q.After, "customerId": q.CustomerID} {
		if len(v) > MaxTextLen || api.CheckText(v) != "" {
			return api.Error(w, http.StatusBadRequest, name+" must be an id: printable text of at most 256 bytes, got "+api.Quote(v))
		}
	}
	parts, err := fanout[[]Order](r.Context(), a, q)
	if err != nil {
		return engineError(w, err)
	}
	page, next := api.MergePage(parts, func(o Order) string { return o.ID }, p.Limit)
	out := struct {
		Orders []orderDTO `json:"orders"`
		Next   string     `json:"next,omitempty"`
	}{Orders: make([]orderDTO, len(page)), Next: next}
	for i := range page {
		out.Orders[i] = orderOut(&page[i])
	}
	return writeJSON(w, http.StatusOK, out)
}

type timelineStep struct {
	Step         string `json:"step"`
	Status       string `json:"status"`
	At           string `json:"at"`
	Partitions   []int  `json:"partitions"`
	Compensation bool   `json:"compensation"`
}

type timeline struct {
	SagaID        string         `json:"sagaId"`
	OrderID       string         `json:"orderId"`
	Status        string         `json:"status"`
	Terminal      bool           `json:"terminal"`
	StartedAt     string         `json:"startedAt"`
	UpdatedAt     string         `json:"updatedAt"`
	FailureReason string         `json:"failureReason,omitempty"`
	Partition     int            `json:"partition"`
	Steps         []timelineStep `json:"steps"`
	Products      []string       `json:"products"`
	DLQ           int            `json:"dlq"`
}

func (a *API) sagaTimeline(w http.ResponseWriter, r *http.Request) int {
	id, s, code := a.sagaOfPath(w, r)
	if s == nil {
		return code
	}
	o, err := query[*Order](r.Context(), a, OrderKey(id), &GetOrder{ID: id})
	if err != nil {
		return engineError(w, err)
	}
	counts, err := fanout[int](r.Context(), a, &SagaDLQ{OrderID: id})
	if err != nil {
		return engineError(w, err)
	}
	t := timeline{SagaID: s.ID, OrderID: s.ID, Status: s.Status, Terminal: s.Terminal(), StartedAt: stamp(s.StartedAt),
		UpdatedAt: stamp(s.UpdatedAt), FailureReason: s.FailureReason, Partition: a.eng.PartitionOf(OrderKey(id)),
		Steps: make([]timelineStep, len(s.Steps)), Products: append([]string{}, s.Products...)}
	for _, n := range counts {
		t.DLQ += n
	}
	for i, st := range s.Steps {
		t.Steps[i] = timelineStep{Step: st.Name(), Status: st.Status(), At: stamp(st.At),
			Partitions: a.stepPartitions(st.Name(), s, o), Compensation: st.Name() == "COMPENSATION"}
	}
	return writeJSON(w, http.StatusOK, t)
}

// stepPartitions are the partitions where a step's work is applied: the
// stock's products, the payment's, the customer's, else the order's.
func (a *API) stepPartitions(step string, s *Saga, o *Order) []int {
	var keys []string
	switch step {
	case "STOCK_RESERVATION":
		for _, p := range s.Products {
			keys = append(keys, ProductKey(p))
		}
	case "PAYMENT":
		keys = []string{PaymentKey(s.ID)}
	case "CUSTOMER_VERIFICATION":
		if o != nil {
			keys = []string{CustomerKey(o.CustomerID)}
		}
	case "COMPENSATION":
		for _, p := range s.Products {
			keys = append(keys, ProductKey(p))
		}
		keys = append(keys, PaymentKey(s.ID))
	}
	if len(keys) == 0 {
		keys = []string{OrderKey(s.ID)}
	}
	parts := make([]int, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, a.eng.PartitionOf(k))
	}
	slices.Sort(parts)
	return slices.Compact(parts)
}

package commerce

import (
	"sort"

	"github.com/surge-run/surge/internal/engine"
)

// Query types; each answers from this partition only (the API fans the
// list queries out to every partition).
type (
	GetCustomer      struct{ ID string }
	ListCustomers    struct{ Limit int }
	GetProduct       struct{ ID string }
	ListProducts     struct{ Limit int }
	GetOrder         struct{ ID string }
	ListOrders       struct{ Limit int }
	OrdersByCustomer struct {
		CustomerID string
		Limit      int
	}
	GetSaga   struct{ ID string }
	ListSagas struct {
		Status, Type string // "" matches any
		Limit        int
	}
	GetPayment     struct{ ID string }
	PaymentByOrder struct{ OrderID string }
	// Events of an entity key (CustomerKey, ProductKey, OrderKey,
	// PaymentKey), oldest first, at most Limit (the newest ones).
	Events struct {
		Key   string
		Limit int
	}
)

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func limit(n, max int) int {
	if n <= 0 || n > max {
		return max
	}
	return n
}

// Query implements engine.Machine. A found entity is a copy (nil if not
// found); lists are sorted by id and hold at most Limit entries.
func (m *Machine) Query(q any) any {
	if v, ok := m.queryDLQ(q); ok {
		return v
	}
	switch q := q.(type) {
	case *GetCustomer:
		if c := m.customers[q.ID]; c != nil {
			cp := *c
			return &cp
		}
		return (*Customer)(nil)
	case *ListCustomers:
		var out []Customer
		for _, k := range sortedKeys(m.customers)[:limit(q.Limit, len(m.customers))] {
			out = append(out, *m.customers[k])
		}
		return out
	case *GetProduct:
		if p := m.products[q.ID]; p != nil {
			return p.copy()
		}
		return (*Product)(nil)
	case *ListProducts:
		var out []Product
		for _, k := range sortedKeys(m.products)[:limit(q.Limit, len(m.products))] {
			out = append(out, *m.products[k].copy())
		}
		return out
	case *GetOrder:
		if o := m.orders[q.ID]; o != nil {
			return o.copy()
		}
		return (*Order)(nil)
	case *ListOrders:
		var out []Order
		for _, k := range sortedKeys(m.orders)[:limit(q.Limit, len(m.orders))] {
			out = append(out, *m.orders[k].copy())
		}
		return out
	case *OrdersByCustomer:
		var out []Order
		for _, k := range sortedKeys(m.orders) {
			if o := m.orders[k]; o.CustomerID == q.CustomerID && (q.Limit <= 0 || len(out) < q.Limit) {
				out = append(out, *o.copy())
			}
		}
		return out
	case *GetSaga:
		if s := m.sagas[q.ID]; s != nil {
			return s.copy()
		}
		return (*Saga)(nil)
	case *ListSagas:
		var out []Saga
		for _, k := range sortedKeys(m.sagas) {
			s := m.sagas[k]
			if (q.Status == "" || s.Status == q.Status) && (q.Type == "" || s.Type == q.Type) && (q.Limit <= 0 || len(out) < q.Limit) {
				out = append(out, *s.copy())
			}
		}
		return out
	case *GetPayment:
		if o, ok := OrderOfPaymentID(q.ID); ok {
			if p := m.payments[o]; p != nil {
				cp := *p
				return &cp
			}
		}
		return (*Payment)(nil)
	case *PaymentByOrder:
		if p := m.payments[q.OrderID]; p != nil {
			cp := *p
			return &cp
		}
		return (*Payment)(nil)
	case *Events:
		l := m.events[q.Key]
		if l == nil {
			return []Event{}
		}
		return l.newest(limit(q.Limit, l.n))
	}
	return nil
}

// Workload is the commerce workload for the engine.
type Workload struct{}

func (Workload) ID() uint8                               { return WorkloadID }
func (Workload) Name() string                            { return "commerce" }
func (Workload) NewMachine(partition int) engine.Machine { return newMachineAt(partition) }

// WireTypes lists the queries, replies and notes that cross between nodes
// in cluster mode (engine.WireTypes).
func (Workload) WireTypes() []any {
	return []any{&Result{}, OrderChanged{},
		&GetCustomer{}, &ListCustomers{}, &GetProduct{}, &ListProducts{}, &GetOrder{}, &ListOrders{}, &OrdersByCustomer{},
		&GetSaga{}, &ListSagas{}, &GetPayment{}, &PaymentByOrder{}, &Events{},
		&Customer{}, []Customer{}, &Product{}, []Product{}, &Order{}, []Order{}, &Saga{}, []Saga{}, &Payment{}, []Event{},
		&ListDLQ{}, &GetDLQ{}, &StatsDLQ{}, &DLQEntry{}, []DLQEntry{}, &DLQStats{}}
}

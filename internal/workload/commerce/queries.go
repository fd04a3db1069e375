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
// found); lists are sorted by id and hold at most Limit entries. Each
// family of queries answers in its own function; a query no family knows
// gets nil.
func (m *Machine) Query(q any) any {
	if v, ok := m.queryDLQ(q); ok {
		return v
	}
	if v, ok := m.queryCatalog(q); ok {
		return v
	}
	if v, ok := m.queryOrders(q); ok {
		return v
	}
	if v, ok := m.queryPayments(q); ok {
		return v
	}
	if v, ok := m.queryOps(q); ok {
		return v
	}
	return nil
}

// queryCatalog answers the customer and product queries.
func (m *Machine) queryCatalog(q any) (any, bool) {
	switch q := q.(type) {
	case *GetCustomer:
		if c := m.customers[q.ID]; c != nil {
			cp := *c
			return &cp, true
		}
		return (*Customer)(nil), true
	case *ListCustomers:
		var out []Customer
		for _, k := range sortedKeys(m.customers)[:limit(q.Limit, len(m.customers))] {
			out = append(out, *m.customers[k])
		}
		return out, true
	case *GetProduct:
		if p := m.products[q.ID]; p != nil {
			return p.copy(), true
		}
		return (*Product)(nil), true
	case *ListProducts:
		var out []Product
		for _, k := range sortedKeys(m.products)[:limit(q.Limit, len(m.products))] {
			out = append(out, *m.products[k].copy())
		}
		return out, true
	}
	return nil, false
}

// queryOrders answers the order and saga queries.
func (m *Machine) queryOrders(q any) (any, bool) {
	switch q := q.(type) {
	case *GetOrder:
		if o := m.orders[q.ID]; o != nil {
			return o.copy(), true
		}
		return (*Order)(nil), true
	case *ListOrders:
		var out []Order
		for _, k := range sortedKeys(m.orders)[:limit(q.Limit, len(m.orders))] {
			out = append(out, *m.orders[k].copy())
		}
		return out, true
	case *OrdersByCustomer:
		var out []Order
		for _, k := range sortedKeys(m.orders) {
			if o := m.orders[k]; o.CustomerID == q.CustomerID && (q.Limit <= 0 || len(out) < q.Limit) {
				out = append(out, *o.copy())
			}
		}
		return out, true
	case *GetSaga:
		if s := m.sagas[q.ID]; s != nil {
			return s.copy(), true
		}
		return (*Saga)(nil), true
	case *ListSagas:
		var out []Saga
		for _, k := range sortedKeys(m.sagas) {
			s := m.sagas[k]
			if (q.Status == "" || s.Status == q.Status) && (q.Type == "" || s.Type == q.Type) && (q.Limit <= 0 || len(out) < q.Limit) {
				out = append(out, *s.copy())
			}
		}
		return out, true
	}
	return nil, false
}

// queryPayments answers the payment queries and an entity's events.
func (m *Machine) queryPayments(q any) (any, bool) {
	switch q := q.(type) {
	case *GetPayment:
		if o, ok := OrderOfPaymentID(q.ID); ok {
			if p := m.payments[o]; p != nil {
				cp := *p
				return &cp, true
			}
		}
		return (*Payment)(nil), true
	case *PaymentByOrder:
		if p := m.payments[q.OrderID]; p != nil {
			cp := *p
			return &cp, true
		}
		return (*Payment)(nil), true
	case *Events:
		l := m.events[q.Key]
		if l == nil {
			return []Event{}, true
		}
		return l.newest(limit(q.Limit, l.n)), true
	}
	return nil, false
}

// Workload is the commerce workload for the engine.
type Workload struct{}

func (Workload) ID() uint8                               { return WorkloadID }
func (Workload) Name() string                            { return "commerce" }
func (Workload) NewMachine(partition int) engine.Machine { return newMachineAt(partition) }

// WireTypes lists the queries, replies and notes that cross between nodes
// in cluster mode (engine.WireTypes).
func (Workload) WireTypes() []any {
	types := []any{&Result{}, OrderChanged{},
		&GetCustomer{}, &ListCustomers{}, &GetProduct{}, &ListProducts{}, &GetOrder{}, &ListOrders{}, &OrdersByCustomer{},
		&GetSaga{}, &ListSagas{}, &GetPayment{}, &PaymentByOrder{}, &Events{},
		&Customer{}, []Customer{}, &Product{}, []Product{}, &Order{}, []Order{}, &Saga{}, []Saga{}, &Payment{}, []Event{},
		&ListDLQ{}, &GetDLQ{}, &StatsDLQ{}, &DLQEntry{}, []DLQEntry{}, &DLQStats{}}
	return append(types, opsWireTypes()...)
}

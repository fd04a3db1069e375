package commerce

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/module"
)

// Module is the commerce workload as the server runs it.
var Module = module.Module{
	Name: "commerce",
	Flags: []module.Flag{
		module.Duration("saga-deadline", "SURGE_SAGA_DEADLINE", time.Duration(DefaultDeadline),
			"how long an order's saga may run before it is compensated (stock released, payment refunded, order CANCELLED) and marked TIMED_OUT; each order logs the deadline it was created with").
			NotNegative("must be a positive duration such as 60s"),
		module.Duration("saga-retention", "SURGE_SAGA_RETENTION", DefaultSagaRetention,
			"how long an ended order saga (COMPLETED, COMPENSATED, FAILED, TIMED_OUT) stays readable at /api/sagas before it and its bookkeeping are purged; orders, payments and events are kept. 0 keeps them for ever; each order logs the retention it was created with").
			NotNegative("must be 0 (keep for ever) or a positive duration such as 15m"),
	},
	// The dead-letter queue and fault injection are operators' tools.
	Roles: map[string]auth.Role{
		"GET /api/admin/dlq":              auth.Admin,
		"GET /api/admin/dlq/{$}":          auth.Admin,
		"GET /api/admin/dlq/count":        auth.Admin,
		"GET /api/admin/dlq/{id}":         auth.Admin,
		"POST /api/admin/dlq/{id}/replay": auth.Admin,
		"DELETE /api/admin/dlq/{id}":      auth.Admin,
		"POST /api/admin/fault":           auth.Admin,
	},
	// An order's long poll (?waitMs) and its event stream.
	LongLived: []string{"GET /api/orders/{id}", "GET /api/orders/{id}/{sub}"},
	Open: func(env module.Env) (module.Parts, error) {
		hub := NewHub(env.MaxWaiters)
		sagas := NewSagaMetrics()
		return module.Parts{
			Workload: Workload{},
			Notes: func(p int, v any) {
				sagas.Note(p, v) // first: a woken long poll may read it
				hub.Notify(v)
			},
			Serve: func(h module.Host) (module.Served, error) {
				a := NewAPI(h.Engine, hub).SetSagaDeadline(env.Settings.Duration("saga-deadline")).
					SetSagaRetention(env.Settings.Duration("saga-retention"))
				a.Register(h.Mux, h.Metrics)
				if env.Clustered {
					sagas.CountOnlyServed(h.Engine.Serves)
				}
				for _, c := range []prometheus.Collector{a.DLQCollector(), a.StockCollector(), sagas.Collector()} {
					if err := h.Registry.Register(c); err != nil {
						return module.Served{}, err
					}
				}
				// Long polls and streams answer now instead of holding the
				// shutdown.
				return module.Served{Shutdown: a.Shutdown}, nil
			},
		}, nil
	},
}

package jobs

import (
	"net/http"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/module"
)

// Module is the jobs workload as the server runs it.
var Module = module.Module{
	Name: "jobs",
	Flags: []module.Flag{
		module.Duration("job-lease", "SURGE_JOB_LEASE", DefaultLease,
			"how long a job pushed to a worker stays leased without a heartbeat; past it the job is retried elsewhere").
			NotNegative("must be a positive duration such as 30s"),
		module.Duration("job-retention", "SURGE_JOB_RETENTION", DefaultRetention,
			"how long a finished job (DONE or DEAD_LETTERED) and its log stay readable before they are purged; each job logs the retention it was submitted with").
			NotNegative("must be a positive duration such as 24h"),
		module.Int("max-workers", "SURGE_MAX_WORKERS", DefaultMaxWorkers,
			"job workers registered at once; more get RESOURCE_EXHAUSTED (a worker's place is freed when it deregisters, or --worker-grace after it went offline)"),
		module.Duration("worker-grace", "SURGE_WORKER_GRACE", DefaultWorkerGrace,
			"how long a job worker that went offline (no stream, no heartbeat within --job-lease) keeps its place under --max-workers before it is forgotten").
			NotNegative("must be a positive duration such as 30s"),
	},
	// A worker's stream lasts as long as the worker; the registry bounds
	// them (one per worker), not the in-flight cap.
	Exempt: []string{StreamPath},
	// Queue and worker administration is admin; a worker's own calls
	// take a jobs:worker token (or jobs:admin) and nothing else does.
	Roles: map[string]auth.Role{
		jqpbconnect.AdminServiceCreateQueueProcedure:    auth.Admin,
		jqpbconnect.AdminServiceDeleteQueueProcedure:    auth.Admin,
		jqpbconnect.AdminServicePauseQueueProcedure:     auth.Admin,
		jqpbconnect.AdminServiceResumeQueueProcedure:    auth.Admin,
		jqpbconnect.AdminServiceDrainWorkerProcedure:    auth.Admin,
		jqpbconnect.AdminServiceShutdownWorkerProcedure: auth.Admin,
		"/" + jqpbconnect.WorkerServiceName + "/":       auth.Worker,
	},
	Open: func(env module.Env) (module.Parts, error) {
		hub := NewHub(env.Settings.Int("max-workers")).SetGrace(env.Settings.Duration("worker-grace"))
		return module.Parts{
			Workload: &Workload{Partitions: env.Partitions, Listening: hub.Linked},
			Notes:    func(_ int, v any) { hub.Notify(v) },
			Serve: func(h module.Host) (module.Served, error) {
				a := NewAPI(h.Engine, hub).SetLease(env.Settings.Duration("job-lease")).
					SetRetention(env.Settings.Duration("job-retention")).SetHealth(h.Healthy)
				if err := h.Registry.Register(a.Collector()); err != nil {
					return module.Served{}, err
				}
				a.RegisterOps(h.Mux, h.Metrics)
				var services []module.GRPCService
				for _, s := range a.Handlers(h.GRPCOptions(MaxMessageBytes)...) {
					g := module.GRPCService{Name: s.Name, Path: s.Path, Handler: s.Handler, MaxMessage: MaxMessageBytes}
					if s.Name == jqpbconnect.WorkerServiceName {
						g.Handler, g.LongLived = batchFlushing(s.Handler), []string{StreamPath}
					}
					services = append(services, g)
				}
				// Worker streams end with UNAVAILABLE: workers reconnect.
				return module.Served{GRPC: services, RegisterGRPC: a.RegisterGRPC, Shutdown: a.Shutdown}, nil
			},
		}, nil
	},
}

// batchFlushing hands a stream whose writer can hold its flushes (the
// server gives long-lived calls one) the writer as the BatchFlusher its
// sends use.
func batchFlushing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f, ok := w.(BatchFlusher); ok {
			r = r.WithContext(WithBatchFlusher(r.Context(), f))
		}
		h.ServeHTTP(w, r)
	})
}

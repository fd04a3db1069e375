package sequencer

import (
	"time"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/module"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
)

// Module is the sequencer workload as the server runs it.
var Module = module.Module{
	Name: "sequencer",
	Flags: []module.Flag{
		module.Duration("seq-retention", "SURGE_SEQ_RETENTION", time.Duration(DefaultRetentionNs),
			"how long a released sequencer message stays readable when no consumer has committed past it (with consumers it goes once all have); each message logs the retention it was published with").
			NotNegative("must be a positive duration such as 24h"),
		module.Int("seq-processors", "SURGE_SEQ_PROCESSORS", DefaultBenchProcessors,
			"goroutines processing the messages of the benchmark routes (POST /messages)").
			NotNegative("must be positive (or 0 for the default)"),
	},
	// A Read follows its group for as long as its reader runs; the hub
	// bounds them (--max-waiters).
	Exempt: []string{ReadPath},
	// Deleting a group deletes its messages for every producer and
	// consumer; reading the output is a read, though a gRPC call.
	Roles: map[string]auth.Role{
		"DELETE /v1/groups/{group}":                       auth.Admin,
		seqpbconnect.SequencerServiceDeleteGroupProcedure: auth.Admin,
		seqpbconnect.SequencerServiceReadProcedure:        auth.Read,
	},
	// The lease and output long polls and the output stream.
	LongLived: []string{"POST /v1/groups/{group}/lease", "GET /v1/groups/{group}/output", "GET /v1/groups/{group}/output/stream"},
	Open: func(env module.Env) (module.Parts, error) {
		hub := NewHub(env.MaxWaiters)
		return module.Parts{
			Workload: &Workload{},
			Notes:    func(_ int, v any) { hub.Notify(v) },
			Serve: func(h module.Host) (module.Served, error) {
				a := NewAPI(h.Engine, hub).SetRetention(env.Settings.Duration("seq-retention")).
					SetBenchProcessors(env.Settings.Int("seq-processors"))
				a.Register(h.Mux, h.Metrics)
				if err := h.Registry.Register(a.Collector()); err != nil {
					return module.Served{}, err
				}
				path, handler := a.GRPCHandler(h.GRPCOptions(MaxMessageBytes)...)
				// Long polls and streams answer at shutdown; benchmark
				// processors stop.
				return module.Served{Shutdown: a.Shutdown, GRPC: []module.GRPCService{{
					Name: seqpbconnect.SequencerServiceName, Path: path, Handler: handler,
					MaxMessage: MaxMessageBytes, LongLived: []string{ReadPath, LeasePath},
				}}}, nil
			},
		}, nil
	},
}

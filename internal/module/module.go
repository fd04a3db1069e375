// Package module is the contract between the server and a workload. Each
// workload package exports one Module value; the server runs a list of
// them and knows nothing else about any workload: the Module declares the
// workload's flags and admission-exempt paths, and, once the server has
// opened its log, gives it the engine.Workload, where its notes go, its
// HTTP routes and gRPC services and its shutdown.
//
// The engine imports no workload and this package imports no workload, so
// a new workload is one folder (its package, holding its Module) plus one
// line in the server's list (server.Builtin).
package module

import (
	"context"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/engine"
)

// Module is a workload as a server runs it.
type Module struct {
	// Name names the workload in errors and logs ("ticketing").
	Name string
	// Flags are the workload's own `surge serve` flags; Open reads their
	// values from Env.Settings.
	Flags []Flag
	// Exempt are request paths the server's in-flight limit does not
	// count: calls that last as long as their client wants (a stream
	// following a queue), which the workload bounds itself.
	Exempt []string
	// Roles are the roles of the routes (HTTP patterns as registered,
	// "GET /v1/x/{id}") and gRPC procedures ("/pkg.Service/Method") or
	// whole services ("/pkg.Service/") that do not need the role their
	// method gives (auth.MethodRole, auth.ProcedureRole): admin calls,
	// the jobs worker's calls. A key naming no route is an error.
	Roles map[string]auth.Role
	// LongLived are the HTTP patterns of calls that may wait (long polls,
	// streams): each counts against its token's --max-streams-per-token
	// while open. gRPC calls say theirs in GRPCService.LongLived.
	LongLived []string
	// Open sets the workload up for one server once its log is open (the
	// partition count is known) and before its engine opens: what Open
	// creates to receive notes exists before recovery, which may already
	// complete commands that notify.
	Open func(Env) (Parts, error)
}

// Env is what a server tells a module it opens.
type Env struct {
	// Settings hold the values of the module's Flags: what the command
	// line or its SURGE_* variables set, and for a setting absent from
	// the map (server.Config left it out) the zero value, which each
	// workload reads as its own default.
	Settings   Settings
	Partitions int
	// MaxWaiters bounds the long polls and streams woken by notes that a
	// workload holds open at once (--max-waiters); 0: its own default.
	MaxWaiters int
	// Clustered is true on a node of a cluster on Kafka: no partition is
	// served before the node joins, so a module must not wait for one
	// while serving starts.
	Clustered bool
	Logger    *slog.Logger
}

// Parts is one module set up for one server.
type Parts struct {
	// Workload is handed to engine.Open.
	Workload engine.Workload
	// Notes receives what the workload's Machines pass to Effects.Notify,
	// once durable (engine.Options.Notes); nil if they notify nothing. It
	// runs on the log's completion goroutine and must not block.
	Notes func(partition int, v any)
	// Serve mounts the workload's routes and services once the engine is
	// open, before the server accepts requests.
	Serve func(Host) (Served, error)
}

// Host is what a server offers a module's Serve.
type Host struct {
	// Context ends when the server is told to stop; a module may use it
	// for the queries it makes while serving starts.
	Context context.Context
	Engine  *engine.Engine
	// Mux and Metrics take the workload's HTTP routes (API.Register).
	Mux     *http.ServeMux
	Metrics *api.Metrics
	// Registry takes the workload's own Prometheus collectors.
	Registry prometheus.Registerer
	// Healthy is the server's health as /healthz reports it: ready and
	// its log working.
	Healthy func() bool
	// GRPCOptions are the handler options of every gRPC service the
	// server mounts, for requests of at most maxMessage bytes.
	GRPCOptions func(maxMessage int) []connect.HandlerOption
}

// Served is what a module's Serve hands back to its server.
type Served struct {
	// GRPC are the workload's gRPC services, mounted with health checks
	// and reflection for them.
	GRPC []GRPCService
	// RegisterGRPC, if set, registers the same services on the grpc-go
	// server of --grpc-addr, each method running its connect handler's
	// code (api.Unary); the server applies the same gate, admission,
	// limits, tracing and metrics there. Services it leaves out are
	// served on --addr only.
	RegisterGRPC func(grpc.ServiceRegistrar)
	// Log are slog attributes (key, value, ...) added to the server's
	// "surge serving" line.
	Log []any
	// Shutdown is called first in a graceful shutdown, before in-flight
	// requests are waited for: long polls and streams answer now instead
	// of holding it. May be nil.
	Shutdown func()
}

// GRPCService is one connect service as its generated New...Handler
// returns it.
type GRPCService struct {
	// Name is the fully qualified service name, which health checks and
	// reflection list; Path its prefix "/pkg.Service/".
	Name, Path string
	Handler    http.Handler
	// MaxMessage is the largest request message it reads, as passed to
	// Host.GRPCOptions.
	MaxMessage int
	// LongLived are the paths of calls that may outlast the server's
	// request timeouts (streams, long polls): they are lifted for them,
	// and their writes are bounded by the stall timeout instead. The
	// writer such a call gets can hold its flushes (Hold, Release).
	LongLived []string
}

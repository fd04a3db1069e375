// Package server wires the embedded log (or a cluster node), the engine,
// the workload modules and the HTTP listener into the process that
// `surge serve` runs: New opens it, Start serves, Shutdown stops it
// gracefully, and Run does all three.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/module"
	"github.com/surge-run/surge/internal/tracing"
)

// Config is what `surge serve` takes.
type Config struct {
	Addr string
	// GRPCAddr, if set, serves the modules' gRPC services with grpc-go
	// on its own listener there as well (--grpc-addr); "" serves them
	// on Addr only.
	GRPCAddr string
	// GRPCMaxStreams is the concurrent streams per connection on
	// GRPCAddr (--grpc-max-streams; 0: DefaultGRPCMaxStreams).
	GRPCMaxStreams int
	DataDir        string
	Partitions     int
	SnapshotEvery  int
	// SnapshotBytes and SnapshotInterval are the other two snapshot
	// triggers (engine.Options): 0 means the engine's default, negative
	// turns the trigger off.
	SnapshotBytes    int64
	SnapshotInterval time.Duration
	SyncInterval     time.Duration
	// MaxQueueDelay is engine.Options.MaxQueueDelay: 0 for the waiting
	// room's patience (--max-wait, see queueDelay), negative for no limit.
	MaxQueueDelay   time.Duration
	ShutdownTimeout time.Duration
	// Connection and request limits (api.Limits; 0 means the default,
	// for MaxConns derived from the open-file limit).
	MaxConns    int
	IdleTimeout time.Duration
	// ReadTimeout bounds reading a request (api.Limits.ReadTimeout; 0:
	// api.DefaultReadTimeout); on --grpc-addr, how long a call's message
	// may take to arrive while it holds room in the body budget.
	ReadTimeout time.Duration
	MaxStreams  int
	MaxInflight int
	MaxWait     time.Duration // the waiting room's patience
	WaitingRoom int           // requests waiting for an in-flight slot at most
	// StallTimeout and StreamBuffer bound streams and long polls
	// (api.Limits; 0 means the default).
	StallTimeout time.Duration
	StreamBuffer int64
	// MaxBodyMemory bounds the bytes of large request bodies held at once
	// (api.Limits.BodyMemory; 0: api.DefaultBodyMemory).
	MaxBodyMemory int64
	// MaxWaiters bounds, separately for each workload, the long polls and
	// streams woken by notes that it holds open at once (the commerce
	// order waits, the sequencer's lease and output waits and streams);
	// 0 means each workload's default.
	MaxWaiters int
	// Pprof serves net/http/pprof under /debug/pprof/ for profiling.
	Pprof bool
	// PprofMutexFraction samples 1 in N contended mutexes for
	// /debug/pprof/mutex (0: off); needs Pprof.
	PprofMutexFraction int
	// PprofBlockRate samples one blocking event per this much time
	// blocked for /debug/pprof/block (0: off); needs Pprof.
	PprofBlockRate time.Duration
	// HTTP1Standard serves every cleartext HTTP/1.1 request through
	// net/http (--http1-lean=false); by default the routes marked lean
	// are served by the listener's own loop (api.Limits.Lean).
	HTTP1Standard bool
	// HTTP2Standard serves HTTP/2 connections (h2c and over TLS) through
	// net/http's HTTP/2 server (--http2-lean=false); by default Surge's
	// own serves them (api.Limits.LeanH2), where a request waiting for an
	// in-flight slot holds no goroutine.
	HTTP2Standard bool
	// UI serves the operator's web console at /ui/ (--ui, on by default
	// for `surge serve`; off in a Config that does not say).
	UI bool
	// MemoryLimit is the Go runtime's soft memory limit in bytes: 0 means
	// DefaultMemoryLimit, negative means none. GOMEMLIMIT, if set, wins.
	MemoryLimit int64
	Logger      *slog.Logger
	// Modules are the workloads served; nil means Builtin().
	Modules []module.Module
	// Settings are the values of the modules' flags by flag name (e.g.
	// "retention": 15*time.Minute); a module reads a setting left out as
	// its zero value, which each takes for its default.
	Settings module.Settings
	// Cluster, with Kafka set, makes this server a node of a cluster on
	// Apache Kafka instead of an embedded server with a data directory.
	Cluster ClusterConfig
	// TLS, if its files are set, serves the listener over TLS only
	// (--tls-cert, --tls-key, --tls-client-ca).
	TLS api.TLSFiles
	// Auth is the API's tokens and scopes; off (every call open) unless
	// Auth.Tokens is set.
	Auth AuthConfig
	// Insecure lets a server whose Addr is reachable from other machines
	// start without TLS, tokens or (in a cluster) the cluster secret
	// (--insecure); without it such a server refuses to start.
	Insecure bool
	// Tracing turns OpenTelemetry traces on (--otel, the OTEL_*
	// variables); off by default.
	Tracing tracing.Config
	// Tracer, if set, traces with it whatever Tracing says (tests pass
	// one over an in-memory exporter).
	Tracer *tracing.Tracing
	// Ready, if set, receives the bound address once the server accepts
	// requests (tests listen on port 0).
	Ready chan<- string
}

// defaultShutdownTimeout is how long a graceful shutdown waits for the
// requests in flight when Config.ShutdownTimeout is 0.
const defaultShutdownTimeout = 30 * time.Second

// Server is one `surge serve` process.
type Server struct {
	cfg    Config
	logger *slog.Logger
	// gate is the token gate, once installed; SIGHUP may read it first.
	gate   atomic.Pointer[auth.Gate]
	limits api.Limits
	ccfg   ClusterConfig // resolved, in cluster mode
	reg    *prometheus.Registry
	node   *cluster.Node // nil unless clustered
	eng    *engine.Engine
	// served is what each module's Serve handed back, in module order.
	served   []module.Served
	mux      *http.ServeMux
	lean     *api.LeanRoutes // the routes marked for the lean HTTP/1.1 path
	routes   *auth.Routes    // every route's scope
	ln       net.Listener
	srv      *api.Server
	grpc     *grpcEdge         // nil unless GRPCAddr is set
	certs    *api.CertReloader // nil in clear
	serveErr chan error
	ready    atomic.Bool
	memLimit int64
	started  time.Time
	tracer   *tracing.Tracing // nil: tracing off
	recent   *recentLog       // the overview's newest warnings and errors
	// undo releases, last first, what New took besides the engine: the
	// data directory's lock, the node, the early listener, the memory
	// governor.
	undo []func()
}

// Run serves until ctx is cancelled, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return s.Shutdown()
	case err := <-s.serveErr:
		s.abort()
		return err
	}
}

// New checks cfg, opens the log (or joins nothing yet of the cluster),
// recovers the engine and mounts every route; nothing is served before
// Start. ctx bounds what opening waits for (the cluster's brokers, the
// modules' first queries).
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	s := &Server{cfg: cfg, logger: cfg.Logger, serveErr: make(chan error, 1), started: time.Now()}
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	s.recent = &recentLog{}
	s.logger = slog.New(withRecent(s.logger.Handler(), s.recent))
	if s.cfg.ShutdownTimeout <= 0 {
		s.cfg.ShutdownTimeout = defaultShutdownTimeout
	}
	if s.cfg.Modules == nil {
		s.cfg.Modules = Builtin()
	}
	defer func() {
		if err != nil {
			s.abort()
		}
	}()
	// Checked before recovery, which can take a while, so a bad flag is
	// reported at once.
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.listenEarly(); err != nil {
		return nil, err
	}
	s.memLimit = s.startGovernor()
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	parts, err := s.openEngine(ctx)
	if err != nil {
		return nil, err
	}
	// Recovery decodes every snapshot and replays the log tail, leaving
	// garbage several times the live state that GOGC=400 would let the
	// heap keep until long after the server is serving. One forced
	// collection now, before any request waits on it, returns it to the OS.
	debug.FreeOSMemory()
	if err := s.mount(ctx, parts); err != nil {
		return nil, err
	}
	return s, nil
}

// check refuses a bad setting before anything is opened.
func (s *Server) check() error {
	cfg := s.cfg
	limits, err := s.apiLimits()
	if err != nil {
		return err
	}
	s.limits = limits
	if cfg.SnapshotEvery < 0 {
		return fmt.Errorf("--snapshot-every %d: must be a positive number of commands (or 0 for the default, %d)", cfg.SnapshotEvery, engine.DefaultSnapshotEvery)
	}
	if err := cfg.Tracing.Check(); err != nil {
		return err
	}
	if err := checkContention(cfg); err != nil {
		return err
	}
	if err := cfg.Auth.check(); err != nil {
		return err
	}
	if err := module.Check(cfg.Modules, cfg.Settings); err != nil {
		return err
	}
	if err := s.checkTLS(); err != nil {
		return err
	}
	if err := s.checkExposure(); err != nil {
		return err
	}
	s.watchSIGHUP()
	if _, set := os.LookupEnv("GOGC"); !set {
		// State lives in memory and the machine has plenty; collecting
		// less often takes GC work off the request path.
		debug.SetGCPercent(400)
	}
	return nil
}

// apiLimits are the listener's limits, with the paths exempt from the
// in-flight limit: the server's own and the modules'.
func (s *Server) apiLimits() (api.Limits, error) {
	cfg := s.cfg
	exempt := []string{"/healthz", "/v1/health_check", "/metrics", "/actuator/health", "/actuator/health/liveness", "/actuator/health/readiness", "/actuator/info", "/actuator/prometheus", "/debug/pprof/", grpcHealthPath}
	for _, m := range cfg.Modules {
		exempt = append(exempt, m.Exempt...)
	}
	if cfg.Cluster.enabled() {
		// A forwarded call already holds a slot on the node its client
		// reached; refusing it here would fail a request twice counted,
		// and two busy nodes forwarding to each other would refuse each
		// other's calls while their own waited on them.
		exempt = append(exempt, cluster.CallPath)
	}
	return api.Limits{
		MaxConns:     cfg.MaxConns,
		IdleTimeout:  cfg.IdleTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		MaxStreams:   cfg.MaxStreams,
		MaxInflight:  cfg.MaxInflight,
		MaxWait:      cfg.MaxWait,
		WaitingRoom:  cfg.WaitingRoom,
		StallTimeout: cfg.StallTimeout,
		StreamBuffer: cfg.StreamBuffer,
		BodyMemory:   cfg.MaxBodyMemory,
		// Health checks, scrapes and profiles must get through an
		// overload.
		Exempt: exempt,
	}.Resolve()
}

// listenEarly resolves a cluster node's settings and listens: a node
// started on port 0 then advertises the port it got, and connections wait
// in the backlog until it serves. An embedded server listens in Start.
func (s *Server) listenEarly() (err error) {
	if !s.cfg.Cluster.enabled() {
		return nil
	}
	if s.ccfg, err = s.cfg.Cluster.resolve(s.cfg.Addr, s.logger); err != nil {
		return err
	}
	if s.ln, err = net.Listen("tcp", s.cfg.Addr); err != nil {
		return err
	}
	s.undo = append(s.undo, func() { s.ln.Close() })
	s.ccfg.Advertise = advertisePort(s.ccfg.Advertise, s.ln)
	return nil
}

// queueDelay is the partitions' --max-queue-delay: as set, or by default
// the waiting room's patience, so that a partition refuses a command (at
// half of it predicted) only when its wait would approach what a client
// is willing to wait, as the waiting room does. The engine's own default
// (250 ms, refusing at 125 ms predicted) refused bursts that are served
// within a second: the in-flight cap in front already bounds a
// partition's queue, and the waiting room the wait beyond it.
func queueDelay(flag, patience time.Duration) time.Duration {
	if flag != 0 {
		return flag
	}
	return patience
}

// openEngine opens the log (or the cluster node), sets up every module
// and opens the engine over them, recovering its state.
func (s *Server) openEngine(ctx context.Context) ([]module.Parts, error) {
	opts := engine.Options{
		SnapshotEvery:    s.cfg.SnapshotEvery,
		SnapshotBytes:    s.cfg.SnapshotBytes,
		SnapshotInterval: s.cfg.SnapshotInterval,
		MaxQueueDelay:    queueDelay(s.cfg.MaxQueueDelay, s.limits.MaxWait),
		Metrics:          engine.NewMetrics(s.reg),
		Logger:           s.logger,
	}
	if err := s.startTracing(ctx); err != nil {
		return nil, err
	}
	if s.tracer != nil {
		opts.Tracer = s.tracer
	}
	closeLog, err := s.openLog(ctx, &opts)
	if err != nil {
		return nil, err
	}
	parts, workloads, err := s.openModules(&opts)
	if err == nil {
		s.eng, err = engine.Open(opts, workloads...)
	}
	if err != nil {
		closeLog()
		return nil, err
	}
	return parts, nil
}

// openLog opens what the engine logs to: the node's Kafka log or the
// embedded one in the data directory.
func (s *Server) openLog(ctx context.Context, opts *engine.Options) (closeLog func(), err error) {
	if !s.cfg.Cluster.enabled() {
		return s.openDataDir(opts)
	}
	if s.node, err = openCluster(ctx, s.cfg, s.ccfg, s.logger, s.reg); err != nil {
		return nil, err
	}
	s.undo = append(s.undo, func() { s.node.Close() })
	opts.Partitions, opts.Snapshots, opts.Cluster = s.node.Partitions(), s.node.Snapshots(), s.node.EngineCluster()
	return func() {}, nil
}

// Start serves: it listens (unless New did), accepts requests, joins the
// cluster if clustered, and reports ready.
func (s *Server) Start() (err error) {
	defer func() {
		if err != nil {
			s.abort()
		}
	}()
	if s.ln == nil {
		if s.ln, err = net.Listen("tcp", s.cfg.Addr); err != nil {
			return err
		}
		s.undo = append(s.undo, func() { s.ln.Close() })
	}
	lim := s.limits
	if !s.cfg.HTTP1Standard {
		lim.Lean = s.lean
		lim.LeanH2 = !s.cfg.HTTP2Standard
	}
	s.srv = api.NewServer(s.cfg.Addr, s.handler(), lim, s.reg)
	if err := s.startGRPC(); err != nil {
		return err
	}
	go s.serve()
	if s.node != nil {
		// Serving first: other nodes forward calls as soon as they see
		// this node own a partition.
		if err := s.node.Join(s.eng); err != nil {
			s.srv.Close()
			return err
		}
	}
	s.ready.Store(true)
	s.logServing()
	if s.cfg.Ready != nil {
		s.cfg.Ready <- s.Addr()
	}
	return nil
}

// Addr is the address the server listens on; "" before it listens.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

func (s *Server) logServing() {
	where := []any{"data_dir", s.cfg.DataDir}
	if s.node != nil {
		where = []any{"cluster", s.ccfg.Cluster, "node_id", s.ccfg.NodeID, "advertise", s.ccfg.Advertise, "kafka", s.ccfg.Kafka}
	}
	attrs := append(append([]any{"addr", s.Addr(), "grpc_addr", s.GRPCAddr(), "tls", s.certs != nil}, where...), "partitions", s.eng.Partitions(), "ready_after", time.Since(s.started).Round(time.Millisecond),
		"max_conns", s.limits.MaxConns, "max_inflight", s.limits.MaxInflight,
		"max_wait", s.limits.MaxWait, "waiting_room", s.limits.WaitingRoom)
	for _, sv := range s.served {
		attrs = append(attrs, sv.Log...)
	}
	s.logger.Info("surge serving", append(attrs, "memory_limit", s.memLimit)...)
}

// Shutdown stops the server gracefully: the modules' long polls and
// streams answer first, a cluster node hands its partitions over, the
// requests in flight finish (for Config.ShutdownTimeout at most), and the
// engine closes, snapshotting every partition. A server that was not
// started is only closed.
func (s *Server) Shutdown() error {
	if s.srv == nil {
		s.abort()
		return nil
	}
	defer s.release()
	s.logger.Info("shutting down: finishing in-flight requests")
	s.ready.Store(false)
	for _, sv := range s.served {
		if sv.Shutdown != nil {
			sv.Shutdown()
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if s.node != nil {
		// Leaving revokes this node's partitions: each is released with a
		// hand-over snapshot before the group gives it to another node,
		// while the listener still answers the calls in flight to it.
		// Requests still arriving here are forwarded to the new owners.
		if err := s.node.Leave(sctx); err != nil {
			s.logger.Warn("leaving the cluster's group", "err", err)
		}
		s.node.Drain(sctx)
	}
	grpcDone := make(chan struct{})
	go func() {
		defer close(grpcDone)
		if s.grpc != nil {
			s.grpc.shutdown(sctx)
		}
	}()
	shutErr := s.srv.Shutdown(sctx)
	<-grpcDone
	if err := s.eng.Close(); err != nil {
		return fmt.Errorf("closing engine: %w", err)
	}
	s.logger.Info("stopped cleanly")
	if shutErr != nil && !errors.Is(shutErr, context.DeadlineExceeded) {
		return shutErr
	}
	return nil
}

// abort closes the engine, if it opened, without a graceful shutdown, and
// releases the rest.
func (s *Server) abort() {
	if s.eng != nil {
		s.eng.Close()
	}
	s.release()
}

func (s *Server) release() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
	s.undo = nil
}

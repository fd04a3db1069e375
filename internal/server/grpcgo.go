package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/surge-run/surge/internal/api"
)

// grpcPingMinInterval is the shortest interval between a client's
// keepalive pings that the grpc-go edge accepts (with or without calls
// open); faster pingers get GOAWAY, as grpc-go answers abuse. grpc-go's
// own default, 5 minutes, would cut off the workers of jq-style clients,
// which ping every 10 to 30 s.
const grpcPingMinInterval = 5 * time.Second

// grpcStreamWorkers is how many goroutines the grpc-go edge keeps to run
// calls on; a call arriving while all are busy gets a new goroutine.
const grpcStreamWorkers = 256

// grpcEdge serves the modules' services with grpc-go on its own
// transport on --grpc-addr: connect-go on net/http's HTTP/2 spent more
// CPU per unary call than the whole of a do-nothing grpc-go server
// (docs/BENCHMARKS.md). Every call still passes the gate, the admission,
// tracing and the metrics of the server's own listener (run), and runs
// the same handler code (module.Served.RegisterGRPC, api.Unary).
type grpcEdge struct {
	srv   *grpc.Server
	ln    net.Listener
	chain http.Handler // tracing → gate → admission → the call
	// direct, without a gate or tracing, admits calls without building
	// a request for them while no call waits (api.Server.TryAdmit).
	direct *api.Server
	logger *slog.Logger
	stats  *grpcStats
	// bodies is the server's body budget, which calls hold while their
	// messages are read (budgetedRead); maxMessage the largest message.
	bodies     *api.BodyBudget
	maxMessage int
	reads      sync.Pool // of *budgetedRead
	// clientStreams counts the client-streaming calls open
	// (grpcMaxClientStreams).
	clientStreams atomic.Int32
	// slow are the message reads in progress, swept of the budget past
	// the read timeout until quit closes (stop).
	slow     slowReads
	quit     chan struct{}
	quitOnce sync.Once
}

// stop ends the sweep of slow reads.
func (e *grpcEdge) stop() { e.quitOnce.Do(func() { close(e.quit) }) }

// startGRPC listens on --grpc-addr, if set, and serves there every
// service a module registers for grpc-go, with health checks and
// reflection.
func (s *Server) startGRPC() error {
	if s.cfg.GRPCAddr == "" {
		return nil
	}
	if s.cfg.GRPCMaxStreams < 0 {
		return fmt.Errorf("--grpc-max-streams %d (SURGE_GRPC_MAX_STREAMS): must be 0 (default %d) or more", s.cfg.GRPCMaxStreams, DefaultGRPCMaxStreams)
	}
	e := &grpcEdge{logger: s.logger, stats: newGRPCStats(s.reg), bodies: s.srv.Bodies(), maxMessage: s.grpcMaxMessage()}
	e.reads.New = e.newBudgetedRead
	e.slow.clock.Store(time.Now().UnixNano()) // the sweep's clock, until its first tick
	e.quit = make(chan struct{})
	var chain http.Handler = http.HandlerFunc(e.call)
	chain = s.srv.Admit(chain)
	if s.tracer != nil {
		chain = s.tracer.Handler(chain)
	}
	e.chain = chain
	if s.tracer == nil && s.limits.Gate == nil {
		e.direct = s.srv
	}
	e.srv = grpc.NewServer(s.grpcOptions(e)...)
	for _, sv := range s.served {
		if sv.RegisterGRPC != nil {
			sv.RegisterGRPC(budgetedRegistrar{e})
		}
	}
	names := slices.Sorted(maps.Keys(e.srv.GetServiceInfo()))
	healthpb.RegisterHealthServer(budgetedRegistrar{e}, grpcHealth{healthChecker{names: append(names, grpchealth.HealthV1ServiceName), healthy: s.healthy}})
	reflection.Register(e.srv)
	e.stats.addMethods(e.srv)
	ln, err := net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr %s: %w", s.cfg.GRPCAddr, err)
	}
	e.ln = ln
	s.grpc = e
	s.undo = append(s.undo, e.srv.Stop, e.stop)
	go e.sweepSlowReads(s.limits.ReadTimeout, e.quit)
	// The connection cap of --addr applies here too, on its own count:
	// past it connections wait in the listen backlog.
	go func() {
		if err := e.srv.Serve(netutil.LimitListener(ln, s.limits.MaxConns)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.serveErr <- fmt.Errorf("gRPC listener on %s: %w", s.cfg.GRPCAddr, err)
		}
	}()
	return nil
}

// grpcOptions are the limits of the listener on --addr, as grpc-go
// spells them, and the interceptors that run each call through e.
func (s *Server) grpcOptions(e *grpcEdge) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.grpcMaxMessage()),
		// Unread request bytes per stream are bounded by a static window
		// (grpcbodies.go).
		grpc.InitialWindowSize(grpcStreamWindow),
		grpc.InitialConnWindowSize(grpcConnWindow),
		grpc.MaxConcurrentStreams(uint32(s.grpcMaxStreams())),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.limits.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcPingMinInterval, PermitWithoutStream: true}),
		// A connection that has not finished its preface and settings
		// (or TLS handshake) within the header timeout is closed.
		grpc.ConnectionTimeout(s.limits.ReadHeaderTimeout),
		// Calls run on goroutines kept between calls, whose stacks have
		// grown already: a fresh goroutine per call grew its stack
		// through the gate, admission and engine frames, 11 % of the
		// server's CPU in the unary bench.
		grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.UnaryInterceptor(e.unary),
		grpc.StreamInterceptor(e.stream),
	}
	if s.certs != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.certs.ServerConfig())))
	}
	return opts
}

// DefaultGRPCMaxStreams is --grpc-max-streams' default: the streams a
// gRPC client may have open on one connection. A gRPC client does not
// open another connection when it has more calls than the server's
// MAX_CONCURRENT_STREAMS, as Go's HTTP/2 client does: grpc-go, ghz and
// the other stacks queue the calls on the one connection they hold. So
// this is every such client's concurrency, and --max-streams' 128 (for
// h2c on --addr) held the peer's own benchmark, 200 callers on one
// connection, to 128 calls at once, its rate to about three quarters
// (docs/BENCHMARKS.md). 256 leaves the peer's 200 room. It is a memory
// bound too: each stream may hold its window of unread request bytes
// (grpcStreamWindow) before its message's turn in the body budget.
const DefaultGRPCMaxStreams = 256

// grpcMaxStreams is the MAX_CONCURRENT_STREAMS of the grpc-go listener.
func (s *Server) grpcMaxStreams() int {
	if s.cfg.GRPCMaxStreams == 0 {
		return DefaultGRPCMaxStreams
	}
	return s.cfg.GRPCMaxStreams
}

// grpcMaxMessage is the largest request message of the services served
// on grpc-go: grpc-go refuses a larger one with RESOURCE_EXHAUSTED from
// its length prefix, before reading or allocating it.
func (s *Server) grpcMaxMessage() int {
	max := grpcSmallMessage
	for _, sv := range s.served {
		if sv.RegisterGRPC == nil {
			continue
		}
		for _, g := range sv.GRPC {
			max = maxInt(max, g.MaxMessage)
		}
	}
	return max
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// shutdown stops the edge gracefully (calls in flight finish, streams
// were already told to end by the modules' Shutdown) until ctx is done,
// then closes what is left.
func (e *grpcEdge) shutdown(ctx context.Context) {
	defer e.stop()
	done := make(chan struct{})
	go func() {
		e.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.srv.Stop()
		<-done
	}
}

// GRPCAddr is the address the grpc-go edge listens on; "" if it does not.
func (s *Server) GRPCAddr() string {
	if s.grpc == nil {
		return ""
	}
	return s.grpc.ln.Addr().String()
}

func (e *grpcEdge) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if e.direct != nil {
		if held, ok := e.direct.TryAdmit(info.FullMethod); ok {
			return e.unaryDirect(ctx, req, info.FullMethod, h, held)
		}
	}
	return e.unaryChain(ctx, req, info.FullMethod, h)
}

// unaryChain runs a call through the chain (run). Apart from unary, so
// that the variables its closure shares stay off the heap of calls
// admitted directly.
func (e *grpcEdge) unaryChain(ctx context.Context, req any, method string, h grpc.UnaryHandler) (resp any, err error) {
	err = e.run(ctx, method, func(ctx context.Context) error {
		resp, err = h(ctx, req)
		return err
	})
	return resp, err
}

// unaryDirect runs a call TryAdmit admitted as run's direct path does,
// but without the closure and grpcCall that run needs: those were a
// quarter of the edge's own allocations per SubmitJob.
func (e *grpcEdge) unaryDirect(ctx context.Context, req any, method string, h grpc.UnaryHandler, held bool) (resp any, err error) {
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, e.panicked(ctx, method, v)
		}
		if held {
			e.direct.ReleaseSlot()
		}
		e.stats.observe(method, status.Code(err), time.Since(start))
	}()
	return h(ctx, req)
}

func (e *grpcEdge) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !info.IsClientStream {
		if !info.IsServerStream {
			// A unary method served as a stream (unaryStream): its
			// handler runs the unary interceptor.
			return h(srv, ss)
		}
		// One request message, read at the start: through the budget
		// as a unary call's.
		r := &budgetedRead{ServerStream: ss, e: e, shard: e.slow.shard()}
		defer r.done()
		ss = r
	} else {
		if e.clientStreams.Add(1) > grpcMaxClientStreams {
			e.clientStreams.Add(-1)
			return status.Errorf(codes.ResourceExhausted, "%d client-streaming calls (reflection) are open on this server, its limit; close one or retry when one ends", grpcMaxClientStreams)
		}
		defer e.clientStreams.Add(-1)
	}
	return e.run(ss.Context(), info.FullMethod, func(ctx context.Context) error {
		return h(srv, ctxStream{ServerStream: ss, ctx: ctx})
	})
}

// ctxStream is a stream whose handler sees the context the gate and
// admission made (the caller's principal, the trace, the budgets).
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c ctxStream) Context() context.Context { return c.ctx }

// grpcCall is one call on its way through the chain.
type grpcCall struct {
	method string
	fn     func(context.Context) error
	ran    bool
	err    error
}

type grpcCallKey struct{}

// run passes the call through the chain as a request with the call's
// path and metadata: a refusal there (a token, the waiting room) ends it
// with that refusal's code, message, details and trailers.
func (e *grpcEdge) run(ctx context.Context, method string, fn func(context.Context) error) error {
	start := time.Now()
	c := &grpcCall{method: method, fn: fn}
	if e.direct != nil {
		if held, ok := e.direct.TryAdmit(method); ok {
			err := e.recovering(ctx, c)
			if held {
				e.direct.ReleaseSlot()
			}
			e.stats.observe(method, status.Code(err), time.Since(start))
			return err
		}
	}
	w := &grpcWriter{header: http.Header{}}
	e.chain.ServeHTTP(w, callRequest(context.WithValue(ctx, grpcCallKey{}, c), method))
	err := c.err
	if !c.ran {
		err = w.refusal(ctx)
	}
	e.stats.observe(method, status.Code(err), time.Since(start))
	return err
}

// callRequest is the request the chain sees for a call: POST of its
// method's path, with its metadata as headers (Authorization,
// traceparent, ...) and its peer as the remote address.
func callRequest(ctx context.Context, method string) *http.Request {
	h := http.Header{"Content-Type": {"application/grpc"}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, v := range md {
			if !strings.HasPrefix(k, ":") && k != "content-type" {
				h[textproto.CanonicalMIMEHeaderKey(k)] = v
			}
		}
	}
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: method}, RequestURI: method,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Body: http.NoBody}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	return r.WithContext(ctx)
}

// call is the end of the chain: the call's own handler, with the context
// the chain built. What the chain set as headers (the trace's response
// header) become the call's.
func (e *grpcEdge) call(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(grpcCallKey{}).(*grpcCall)
	c.ran = true
	if md := api.HeaderMetadata(w.Header()); md != nil {
		_ = grpc.SetHeader(r.Context(), md)
	}
	c.err = e.recovering(r.Context(), c)
	if c.err != nil {
		// For the trace span's status.
		w.Header().Set("Grpc-Status", strconv.Itoa(int(status.Code(c.err))))
	}
}

// recovering answers a handler's panic (a bug) INTERNAL, as connect's
// WithRecover does on --addr, and logs its first stack per method.
func (e *grpcEdge) recovering(ctx context.Context, c *grpcCall) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = e.panicked(ctx, c.method, v)
		}
	}()
	return c.fn(ctx)
}

// panicked counts and logs a handler's panic v; the call's answer is the
// error it returns. Called in the deferred function that recovered v, so
// the logged stack is the panic's.
func (e *grpcEdge) panicked(ctx context.Context, method string, v any) error {
	e.stats.panicked(method, func() {
		e.logger.ErrorContext(ctx, "gRPC handler panicked; answered INTERNAL (later panics of this method are counted in surge_grpc_panics_total, not logged)",
			"method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	})
	return status.Error(codes.Internal, "internal error: the server failed on this call and logged it; it is not the call's fault")
}

// grpcWriter takes what the chain writes when it refuses a call: in the
// gRPC protocol (the request says application/grpc) a trailers-only
// answer, whose grpc-status, grpc-message and details it decodes.
type grpcWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *grpcWriter) Header() http.Header { return w.header }
func (w *grpcWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *grpcWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if len(w.body) < 4096 {
		w.body = append(w.body, p[:min(len(p), 4096-len(w.body))]...)
	}
	return len(p), nil
}

// refusal is the chain's refusal as the call's status, its retry hints
// (grpc-retry-pushback-ms, Retry-After) as the call's trailers.
func (w *grpcWriter) refusal(ctx context.Context) error {
	if md := api.HeaderMetadata(w.header); md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	if b := w.header.Get("Grpc-Status-Details-Bin"); b != "" {
		if raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(b, "=")); err == nil {
			st := new(spb.Status)
			if proto.Unmarshal(raw, st) == nil {
				return status.ErrorProto(st)
			}
		}
	}
	if v := w.header.Get("Grpc-Status"); v != "" {
		code, _ := strconv.Atoi(v)
		msg, err := url.PathUnescape(w.header.Get("Grpc-Message"))
		if err != nil {
			msg = w.header.Get("Grpc-Message")
		}
		return status.Error(codes.Code(code), msg)
	}
	return status.Error(httpCode(w.status), strings.TrimSpace(string(w.body)))
}

// httpCode is the gRPC code of an HTTP refusal the chain wrote as HTTP
// (none does for a gRPC call today; the mapping is gRPC's own).
func httpCode(status int) codes.Code {
	switch status {
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}

// grpcHealth is grpc.health.v1 on grpc-go, answering as the health
// service on --addr does.
type grpcHealth struct {
	c healthChecker
}

func (h grpcHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	res, err := h.c.Check(ctx, &grpchealth.CheckRequest{Service: req.GetService()})
	if err != nil {
		return nil, api.GRPCError(ctx, err)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_ServingStatus(res.Status)}, nil
}

func (grpcHealth) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	return nil, status.Error(codes.Unimplemented, "List is not served; Check each service")
}

func (grpcHealth) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	return status.Error(codes.Unimplemented, "Watch is not served; poll Check")
}

// grpcStats are the grpc-go edge's calls per method and code, and their
// times. methods is filled once before serving and only read after.
type grpcStats struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	panics  *prometheus.CounterVec
	methods map[string]*methodStats
	logged  sync.Map // method -> *atomic.Bool
}

// methodStats are one method's series, each code's made at its first use.
type methodStats struct {
	seconds prometheus.Observer
	codes   [codes.Unauthenticated + 1]atomic.Pointer[prometheus.Counter]
}

func newGRPCStats(reg prometheus.Registerer) *grpcStats {
	s := &grpcStats{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surge_grpc_calls_total",
			Help: "Calls on the grpc-go listener (--grpc-addr) by method and gRPC status code.",
		}, []string{"method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surge_grpc_call_seconds",
			Help:    "Handling time of the calls on the grpc-go listener (--grpc-addr) by method, admission included.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"method"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surge_grpc_panics_total",
			Help: "Handler panics on the grpc-go listener answered INTERNAL, by method (a bug: the log has the first stack per method).",
		}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(s.calls, s.seconds, s.panics)
	}
	return s
}

// addMethods makes the series of the methods served by srv.
func (s *grpcStats) addMethods(srv *grpc.Server) {
	s.methods = map[string]*methodStats{}
	for svc, info := range srv.GetServiceInfo() {
		for _, m := range info.Methods {
			name := "/" + svc + "/" + m.Name
			s.methods[name] = &methodStats{seconds: s.seconds.WithLabelValues(name)}
		}
	}
}

// observe counts a call; grpc-go refuses unknown methods before the
// interceptors, so every method has its series.
func (s *grpcStats) observe(method string, code codes.Code, d time.Duration) {
	m := s.methods[method]
	if m == nil || int(code) >= len(m.codes) {
		return
	}
	c := m.codes[code].Load()
	if c == nil {
		counter := s.calls.WithLabelValues(method, code.String())
		m.codes[code].CompareAndSwap(nil, &counter)
		c = m.codes[code].Load()
	}
	(*c).Inc()
	m.seconds.Observe(d.Seconds())
}

func (s *grpcStats) panicked(method string, logFirst func()) {
	s.panics.WithLabelValues(method).Inc()
	b, _ := s.logged.LoadOrStore(method, new(atomic.Bool))
	if !b.(*atomic.Bool).Swap(true) {
		logFirst()
	}
}

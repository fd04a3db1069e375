package server

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/module"
)

// grpcSmallMessage bounds the request messages of the health and
// reflection services, which are a few names at most.
const grpcSmallMessage = 64 << 10

// grpcBodySlack is what a request body may hold beyond its one message:
// the 5-byte envelope of gRPC and gRPC-Web, and what compression can add
// to a message that does not compress.
const grpcBodySlack = 64 << 10

// grpcHealthPath is the health service's prefix: exempt from the in-flight
// limit like the HTTP health routes, so probes get through an overload.
const grpcHealthPath = "/" + grpchealth.HealthV1ServiceName + "/"

// mountGRPC serves gRPC (and gRPC-Web and Connect) on the HTTP mux: the
// given services, grpc.health.v1.Health answering for the server ("") and
// each of them, and server reflection listing exactly the services served,
// so grpcurl and ghz work without .proto files. The services are the
// modules' (module.Served.GRPC); their long-lived calls get unlimitedStream.
//
// Each service's path prefix is registered for every method, so it is more
// specific than the JSON 404/405 fallback on "/": gRPC calls never reach
// it. A path under a prefix that names no method gets connect's own answer
// (HTTP 404, which gRPC clients read as UNIMPLEMENTED).
//
// The modules' services have their scopes already (declareServices);
// health checks are open and reflection needs a token of any scope.
func mountGRPC(mux *http.ServeMux, m *api.Metrics, routes *auth.Routes, healthy func() bool, services []module.GRPCService) error {
	names := []string{grpchealth.HealthV1ServiceName}
	for _, s := range services {
		names = append(names, s.Name)
	}
	opts := grpcHandlerOptions(grpcSmallMessage)
	path, h := grpchealth.NewHandler(healthChecker{names: names, healthy: healthy}, opts...)
	if err := declareGRPC(routes, path, true); err != nil {
		return err
	}
	all := append([]module.GRPCService{{Name: grpchealth.HealthV1ServiceName, Path: path, Handler: h, MaxMessage: grpcSmallMessage}}, services...)
	reflector := grpcreflect.NewStaticReflector(names...)
	// v1alpha too: grpcurl and ghz releases still in use ask for it.
	for _, newHandler := range []func(*grpcreflect.Reflector, ...connect.HandlerOption) (string, http.Handler){
		grpcreflect.NewHandlerV1, grpcreflect.NewHandlerV1Alpha,
	} {
		path, h := newHandler(reflector, opts...)
		if err := declareGRPC(routes, path, false); err != nil {
			return err
		}
		all = append(all, module.GRPCService{Path: path, Handler: h, MaxMessage: grpcSmallMessage})
	}
	for _, s := range all {
		h := s.Handler
		if len(s.LongLived) > 0 {
			h = unlimitedStream(h, s.LongLived...)
		}
		h = limitBody(h, int64(s.MaxMessage)+grpcBodySlack, s.LongLived)
		// Counted and timed like the HTTP routes. The HTTP status of a
		// gRPC call is 200 whatever its outcome (that is in grpc-status),
		// so the route's count is of calls, not of successes.
		m.Handle(mux, s.Path, func(w http.ResponseWriter, r *http.Request) int {
			h.ServeHTTP(w, r)
			return http.StatusOK
		})
	}
	return nil
}

// limitBody stops reading a request body past max bytes. connect's
// WithReadMaxBytes alone refuses an oversized message but first reads it
// to the end to discard it (a 256 MiB message was read in full); cut
// here, the read fails at max, the call ends RESOURCE_EXHAUSTED, and the
// connection (HTTP/1.1) or stream (HTTP/2) is closed instead of drained.
//
// A large message also waits for room in its server's body budget
// (--max-body-memory) before it is read, a compressed one with room for
// what it inflates to unless its call is long-lived (at paths).
func limitBody(h http.Handler, max int64, longLived []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, max)
		api.HoldGRPCBody(r, max, !slices.Contains(longLived, r.URL.Path))
		h.ServeHTTP(w, r)
	})
}

// grpcHandlerOptions are the options of every gRPC service the server
// mounts; maxMessage bounds a request message (RESOURCE_EXHAUSTED beyond,
// before more of it is read), as grpc-go servers bound theirs.
func grpcHandlerOptions(maxMessage int) []connect.HandlerOption {
	// A panic is a bug, and becomes INTERNAL with grpc-status trailers
	// instead of an HTTP 500 body no gRPC client can read.
	return []connect.HandlerOption{connect.WithRecover(func(context.Context, connect.Spec, http.Header, any) error {
		return connect.NewError(connect.CodeInternal, errors.New("internal error: the server failed on this call and logged it; it is not the call's fault"))
	}),
		// Go's connect clients ask for gzip by default, and compressing
		// a 40-byte SubmitJob reply cost 17 % of the server's CPU in the
		// jobs bench while saving nothing.
		connect.WithCompressMinBytes(1024),
		connect.WithReadMaxBytes(maxMessage)}
}

// unlimitedStream lifts the server's read and write timeouts (there for
// requests that should finish in seconds) from the long-lived calls at
// paths (streams, and long polls that may wait longer than the write
// timeout), which would otherwise be cut after them.
// The handler gets a writer whose flushes can be held (batchWriter).
func unlimitedStream(h http.Handler, paths ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(paths, r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		// The handler's writes are bounded by the stall timeout instead
		// (api.Stream, found in the context).
		st := api.OpenStream(w, r)
		defer st.Close()
		bw := &batchWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
		h.ServeHTTP(bw, r.WithContext(api.WithStream(r.Context(), st)))
	})
}

// batchWriter holds flushes between Hold and Release, so that a handler
// sending several messages at once (jobs.BatchFlusher) writes them out
// together. One goroutine, the stream's handler, writes and flushes, so it
// needs no lock.
type batchWriter struct {
	http.ResponseWriter
	rc            *http.ResponseController
	held, pending bool
}

func (b *batchWriter) Flush() {
	if b.held {
		b.pending = true
		return
	}
	_ = b.rc.Flush()
}

func (b *batchWriter) Hold() { b.held = true }

func (b *batchWriter) Release() {
	b.held = false
	if b.pending {
		b.pending = false
		_ = b.rc.Flush()
	}
}

// Unwrap lets http.ResponseController reach the server's writer.
func (b *batchWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// healthChecker answers the gRPC health protocol as /healthz answers HTTP:
// SERVING while the server accepts requests and its log works,
// NOT_SERVING before it is ready, while it shuts down, and once the log has
// failed (a health checker then takes the node out). Unknown services are
// NOT_FOUND, as the protocol asks.
type healthChecker struct {
	names   []string
	healthy func() bool
}

func (c healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !slices.Contains(c.names, req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("this server does not serve "+api.Quote(req.Service)))
	}
	if !c.healthy() {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

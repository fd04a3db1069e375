package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/testcerts"
	"github.com/surge-run/surge/internal/tracing"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// serveBoth starts a server with the grpc-go edge on and returns it with
// its two transports for gRPC: connect on --addr and grpc-go on
// --grpc-addr, each as a base URL.
func serveBoth(t testing.TB, cfg Config) (*Server, []transport) {
	t.Helper()
	cfg.Addr, cfg.GRPCAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.ready.Load() { // the test shut it down
			return
		}
		if err := s.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	scheme := "http://"
	if cfg.TLS.Enabled() {
		scheme = "https://"
	}
	return s, []transport{{"connect on --addr", scheme + s.Addr()}, {"grpc-go on --grpc-addr", scheme + s.GRPCAddr()}}
}

// transport is one of the server's gRPC listeners.
type transport struct{ name, base string }

func withToken(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	}))
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Both listeners serve the jobs services, health checks and reflection:
// a job submitted on one is read on the other and reaches a worker
// streaming from either; the grpc-go listener counts its calls per
// method in /metrics.
func TestGRPCGoServesTheJobsServices(t *testing.T) {
	s, tps := serveBoth(t, Config{})
	ctx := ctx30(t)
	for _, tp := range tps {
		t.Run(tp.name, func(t *testing.T) {
			health := grpchealth.NewClient(h2cClient(), tp.base, connect.WithGRPC())
			for _, svc := range []string{"", "jq.JobService", "jq.WorkerService", "jq.AdminService"} {
				if res, err := health.Check(ctx, &grpchealth.CheckRequest{Service: svc}); err != nil || res.Status != grpchealth.StatusServing {
					t.Errorf("Check(%q) = %v, %v, want serving", svc, res, err)
				}
			}
			if _, err := health.Check(ctx, &grpchealth.CheckRequest{Service: "jq.Nope"}); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("Check(jq.Nope): %v, want NOT_FOUND", err)
			}
			stream := grpcreflect.NewClient(h2cClient(), tp.base, connect.WithGRPC()).NewStream(ctx)
			names, err := stream.ListServices()
			stream.Close()
			if err != nil || !slices.Contains(names, protoreflect.FullName("jq.JobService")) {
				t.Errorf("ListServices = %v, %v; want jq.JobService among them", names, err)
			}
		})
	}
	// Submitted on each, read on the other, executed by a worker on each.
	other := map[int]int{0: 1, 1: 0}
	for i, tp := range tps {
		jc := jqpbconnect.NewJobServiceClient(h2cClient(), tp.base, connect.WithGRPC())
		wc := jqpbconnect.NewWorkerServiceClient(h2cClient(), tps[other[i]].base, connect.WithGRPC())
		queue := "q" + string(rune('a'+i))
		admin := jqpbconnect.NewAdminServiceClient(h2cClient(), tp.base, connect.WithGRPC())
		if _, err := admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: queue})); err != nil {
			t.Fatalf("%s: CreateQueue: %v", tp.name, err)
		}
		reg, err := wc.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Hostname: "t", Concurrency: 1, Queues: []string{queue}}))
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		st, err := wc.StreamJobs(sctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: reg.Msg.WorkerId}))
		if err != nil {
			t.Fatal(err)
		}
		res, err := jc.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: queue, Payload: []byte(`{"n":1}`)}))
		if err != nil {
			t.Fatalf("%s: SubmitJob: %v", tp.name, err)
		}
		if !st.Receive() || st.Msg().JobId != res.Msg.JobId {
			t.Fatalf("%s: the worker streaming on the other listener got %v, %v; want job %s", tp.name, st.Msg(), st.Err(), res.Msg.JobId)
		}
		if _, err := wc.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: reg.Msg.WorkerId, JobId: res.Msg.JobId, Success: true})); err != nil {
			t.Fatal(err)
		}
		cancel()
		st.Close()
		read := jqpbconnect.NewJobServiceClient(h2cClient(), tps[other[i]].base, connect.WithGRPC())
		got, err := read.GetJobStatus(ctx, connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: res.Msg.JobId}))
		if err != nil || got.Msg.Job.Status != jqpb.JobStatus_DONE {
			t.Errorf("%s: job read on the other listener: %v, %v; want DONE", tp.name, got, err)
		}
	}
	metrics := getBody(t, "http://"+s.Addr()+"/metrics")
	for _, want := range []string{
		`surge_grpc_calls_total{code="OK",method="/jq.JobService/SubmitJob"} 1`,
		`surge_grpc_calls_total{code="NotFound",method="/grpc.health.v1.Health/Check"} 1`,
		`surge_grpc_call_seconds_count{method="/jq.WorkerService/ReportResult"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The largest request the jobs services take fits on both listeners, and
// one byte more is refused with RESOURCE_EXHAUSTED naming the limit,
// without a job submitted; the server serves on.
func TestGRPCGoMessageLimit(t *testing.T) {
	_, tps := serveBoth(t, Config{})
	ctx := ctx30(t)
	for _, tp := range tps {
		t.Run(tp.name, func(t *testing.T) {
			jc := jqpbconnect.NewJobServiceClient(h2cClient(), tp.base, connect.WithGRPC(), connect.WithSendMaxBytes(64<<20))
			largest := batchOfSize(t, jobs.MaxMessageBytes)
			res, err := jc.SubmitJobs(ctx, connect.NewRequest(largest))
			if err != nil || len(res.Msg.JobIds) != len(largest.Jobs) {
				t.Fatalf("a SubmitJobs of exactly %d bytes: %v, %v; want it submitted", jobs.MaxMessageBytes, res, err)
			}
			_, err = jc.SubmitJobs(ctx, connect.NewRequest(batchOfSize(t, jobs.MaxMessageBytes+1)))
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "4194304") {
				t.Fatalf("a SubmitJobs of %d bytes: %v, want RESOURCE_EXHAUSTED naming the limit 4194304", jobs.MaxMessageBytes+1, err)
			}
			if _, err := jc.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("x")})); err != nil {
				t.Fatalf("SubmitJob after the refusal: %v", err)
			}
		})
	}
}

// batchOfSize is a valid SubmitJobs request of exactly size bytes
// (within the batch's payload total).
func batchOfSize(t *testing.T, size int) *jqpb.SubmitJobsRequest {
	t.Helper()
	const n = 8
	req := &jqpb.SubmitJobsRequest{}
	for range n {
		req.Jobs = append(req.Jobs, &jqpb.SubmitJobRequest{QueueName: "default"})
	}
	for _, j := range req.Jobs {
		j.Payload = make([]byte, (size-64*n)/n)
	}
	// Grow the first payload until the whole message is size.
	first := req.Jobs[0]
	for d := size - proto.Size(req); d != 0; d = size - proto.Size(req) {
		first.Payload = make([]byte, len(first.Payload)+d)
	}
	if proto.Size(req) != size {
		t.Fatalf("built %d bytes, want %d", proto.Size(req), size)
	}
	return req
}

// Tokens on both listeners: no token is UNAUTHENTICATED, a token without
// the method's scope PERMISSION_DENIED, the worker's token opens the
// worker's calls only, health checks are open and reflection needs a
// token.
func TestGRPCGoAuth(t *testing.T) {
	at := newAuthTokens(t)
	_, tps := serveBoth(t, Config{Auth: AuthConfig{Tokens: at.table}})
	ctx := ctx30(t)
	for _, tp := range tps {
		t.Run(tp.name, func(t *testing.T) {
			submit := func(token string) error {
				jc := jqpbconnect.NewJobServiceClient(h2cClient(), tp.base, connect.WithGRPC(), withToken(token))
				_, err := jc.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("x")}))
				return err
			}
			for _, c := range []struct {
				token string
				want  connect.Code
			}{
				{"", connect.CodeUnauthenticated},
				{"not-a-token-of-this-server", connect.CodeUnauthenticated},
				{at.tokens["jobs-read"], connect.CodePermissionDenied},
				{at.tokens["jobs-worker"], connect.CodePermissionDenied},
				{at.tokens["sequencer-admin"], connect.CodePermissionDenied},
			} {
				if err := submit(c.token); connect.CodeOf(err) != c.want {
					t.Errorf("SubmitJob with token %.12q: %v, want %v", c.token, err, c.want)
				}
			}
			if err := submit(at.tokens["jobs-write"]); err != nil {
				t.Errorf("SubmitJob with jobs:write: %v", err)
			}
			wc := jqpbconnect.NewWorkerServiceClient(h2cClient(), tp.base, connect.WithGRPC(), withToken(at.tokens["jobs-worker"]))
			if _, err := wc.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Hostname: "h", Concurrency: 1})); err != nil {
				t.Errorf("RegisterWorker with jobs:worker: %v", err)
			}
			wc = jqpbconnect.NewWorkerServiceClient(h2cClient(), tp.base, connect.WithGRPC(), withToken(at.tokens["jobs-write"]))
			if _, err := wc.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Hostname: "h", Concurrency: 1})); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("RegisterWorker with jobs:write: %v, want PERMISSION_DENIED", err)
			}
			health := grpchealth.NewClient(h2cClient(), tp.base, connect.WithGRPC())
			if res, err := health.Check(ctx, &grpchealth.CheckRequest{}); err != nil || res.Status != grpchealth.StatusServing {
				t.Errorf("health without a token: %v, %v", res, err)
			}
			stream := grpcreflect.NewClient(h2cClient(), tp.base, connect.WithGRPC()).NewStream(ctx)
			_, err := stream.ListServices()
			stream.Close()
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("reflection without a token: %v, want UNAUTHENTICATED", err)
			}
		})
	}
}

// With the server's one in-flight slot held (a long poll on --addr) and
// its waiting room full, a call on either listener is refused at once
// with UNAVAILABLE, the RetryInfo delay and grpc-retry-pushback-ms: the
// two listeners share one admission.
func TestGRPCGoSharesAdmission(t *testing.T) {
	s, tps := serveBoth(t, Config{MaxInflight: 1, WaitingRoom: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holders := make(chan struct{}, 2)
	for range 2 { // one takes the slot, the other the room's one place
		go func() {
			defer func() { holders <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+s.Addr()+"/v1/groups/g1/lease", strings.NewReader(`{"processor":"p","waitMs":60000}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(getBody(t, "http://"+s.Addr()+"/metrics"), "\nsurge_http_waiting_requests 1\n") {
		if time.Now().After(deadline) {
			t.Fatal("the long polls never filled the slot and the room")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tp := range tps {
		t.Run(tp.name, func(t *testing.T) {
			jc := jqpbconnect.NewJobServiceClient(h2cClient(), tp.base, connect.WithGRPC())
			deadline := time.Now().Add(30 * time.Second)
			for {
				cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
				res, err := jc.SubmitJob(cctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("x")}))
				ccancel()
				if connect.CodeOf(err) == connect.CodeUnavailable {
					delay, ok := api.GRPCRetryDelay(err)
					var ce *connect.Error
					errors.As(err, &ce)
					if !ok || delay <= 0 || ce.Meta().Get(api.PushbackHeader) == "" || !strings.Contains(err.Error(), "--waiting-room") {
						t.Errorf("refusal %v: RetryInfo %v (%v), pushback %q; want both, naming --waiting-room", err, delay, ok, ce.Meta().Get(api.PushbackHeader))
					}
					return
				}
				if err == nil {
					t.Fatalf("SubmitJob was served (%v) with the slot and the room taken", res.Msg)
				}
				if time.Now().After(deadline) {
					t.Fatalf("never refused: %v", err)
				}
			}
		})
	}
	cancel()
	<-holders
	<-holders
}

// A SubmitJob on the grpc-go listener is traced as on --addr: the
// traceparent in its metadata is the parent, traceresponse comes back in
// its headers, and the engine's spans hang under the server span.
func TestTraceSubmitJobOverGRPCGo(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	_, tps := serveBoth(t, Config{Tracer: tracing.New(tp)})
	jc := jqpbconnect.NewJobServiceClient(h2cClient(), tps[1].base, connect.WithGRPC())
	req := connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{"n":1}`)})
	req.Header().Set("traceparent", clientParent)
	res, err := jc.SubmitJob(ctx30(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if tr := res.Header().Get("traceresponse"); !strings.HasPrefix(tr, "00-"+clientTraceID+"-") {
		t.Errorf("traceresponse %q, want one in trace %s", tr, clientTraceID)
	}
	id, _ := trace.TraceIDFromHex(clientTraceID)
	name := "jq.JobService/SubmitJob"
	spans := spansOf(t, exp, id, append([]string{name}, engineSpans...)...)
	if p := spans[name].Parent.SpanID().String(); p != clientSpanID {
		t.Errorf("server span's parent %s, want the caller's %s", p, clientSpanID)
	}
	checkEngineSpans(t, spans, name)
}

// A graceful shutdown ends a worker's stream on the grpc-go listener with
// UNAVAILABLE (workers reconnect) instead of waiting for it, and the
// listener is closed after.
func TestGRPCGoGracefulShutdown(t *testing.T) {
	s, tps := serveBoth(t, Config{ShutdownTimeout: 20 * time.Second})
	ctx := ctx30(t)
	wc := jqpbconnect.NewWorkerServiceClient(h2cClient(), tps[1].base, connect.WithGRPC())
	reg, err := wc.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Hostname: "h", Concurrency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := wc.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: reg.Msg.WorkerId}))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for st.Receive() {
		}
		ended <- st.Err()
	}()
	start := time.Now()
	if err := s.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took >= 20*time.Second {
		t.Errorf("Shutdown waited out its timeout (%v) for the open stream", took)
	}
	select {
	case err := <-ended:
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("the stream ended with %v, want UNAVAILABLE", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end")
	}
	jc := jqpbconnect.NewJobServiceClient(h2cClient(), tps[1].base, connect.WithGRPC())
	if _, err := jc.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default"})); err == nil {
		t.Error("SubmitJob on the grpc-go listener after Shutdown was served")
	}
}

// With TLS the grpc-go listener serves TLS only, with the same
// certificate as --addr; a clear-text client gets nothing from it.
func TestGRPCGoTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	_, tps := serveBoth(t, Config{TLS: api.TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}})
	ctx := ctx30(t)
	for _, tp := range tps {
		jc := jqpbconnect.NewJobServiceClient(httpsClient(ca, true), tp.base, connect.WithGRPC())
		if _, err := jc.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("x")})); err != nil {
			t.Errorf("%s: SubmitJob over TLS: %v", tp.name, err)
		}
	}
	clear := jqpbconnect.NewJobServiceClient(h2cClient(), "http://"+strings.TrimPrefix(tps[1].base, "https://"), connect.WithGRPC())
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := clear.SubmitJob(cctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default"})); err == nil {
		t.Error("a clear-text call on the TLS grpc-go listener was served")
	}
}

// A --grpc-addr reachable from other machines is held to --addr's rule:
// without TLS and tokens the server refuses to start, naming the flag.
func TestOpenGRPCAddrBeyondLoopbackIsRefused(t *testing.T) {
	_, err := New(context.Background(), Config{Addr: "127.0.0.1:0", GRPCAddr: "0.0.0.0:0", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "--grpc-addr 0.0.0.0:0") || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("New with an open --grpc-addr: %v, want a refusal naming --grpc-addr and --insecure", err)
	}
}

// The grpc-go listener serves the certificate --addr serves, reloaded
// with it.
func TestGRPCGoTLSReload(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	first, second := ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	files := api.TLSFiles{Cert: dir + "/cert.pem", Key: dir + "/key.pem"}
	first.Install(t, files.Cert, files.Key)
	s, _ := serveBoth(t, Config{TLS: files})
	serial := func() string {
		c, err := tls.Dial("tcp", s.GRPCAddr(), &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := serial(); got != first.Serial.String() {
		t.Fatalf("serial %s on the grpc-go listener, want %s", got, first.Serial)
	}
	second.Install(t, files.Cert, files.Key)
	if err := s.certs.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != second.Serial.String() {
		t.Errorf("serial %s on the grpc-go listener after the reload, want the new %s", got, second.Serial)
	}
}

// A token's worker streams beyond --max-streams-per-token are refused
// RESOURCE_EXHAUSTED naming the flag on either listener.
//
// Each listener gets a server of its own: the token's count of open
// streams drops when a stream's handler returns, which comes a moment
// after the client closes it, so a stream the previous subtest closed
// could still be counted when the next one opens its first (refused,
// unseen: a server stream's refusal shows at Receive), and every later
// stream would then be let in.
func TestGRPCGoStreamsPerToken(t *testing.T) {
	at := newAuthTokens(t)
	cfg := Config{Auth: AuthConfig{Tokens: at.table, MaxOpenPerToken: 1}}
	for i := range 2 { // serveBoth's two listeners
		_, tps := serveBoth(t, cfg)
		tp := tps[i]
		t.Run(tp.name, func(t *testing.T) {
			ctx := ctx30(t)
			wc := jqpbconnect.NewWorkerServiceClient(h2cClient(), tp.base, connect.WithGRPC(),
				connect.WithInterceptors(streamToken(at.tokens["jobs-worker"])), withToken(at.tokens["jobs-worker"]))
			open := func(ctx context.Context) (*connect.ServerStreamForClient[jqpb.JobAssignment], error) {
				reg, err := wc.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Hostname: "h", Concurrency: 1}))
				if err != nil {
					return nil, err
				}
				return wc.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: reg.Msg.WorkerId}))
			}
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			first, err := open(fctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Close()
			deadline := time.Now().Add(30 * time.Second)
			for {
				sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
				second, err := open(sctx)
				if err == nil {
					second.Receive()
					err = second.Err()
					second.Close()
				}
				scancel()
				if connect.CodeOf(err) == connect.CodeResourceExhausted {
					if !strings.Contains(err.Error(), "max-streams-per-token") {
						t.Errorf("refusal %v, want it to name --max-streams-per-token", err)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("a second stream of the token: %v, want RESOURCE_EXHAUSTED", err)
				}
			}
		})
	}
}

// streamToken sends token on streaming calls too (withToken covers unary
// ones).
func streamToken(token string) connect.Interceptor { return tokenInterceptor{token} }

type tokenInterceptor struct{ token string }

func (i tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (i tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		c.RequestHeader().Set("Authorization", "Bearer "+i.token)
		return c
	}
}
func (i tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// A grpc-go connection with no call for --idle-timeout is closed by the
// server (GOAWAY), as an idle connection on --addr is.
func TestGRPCGoIdleConnectionClosed(t *testing.T) {
	s, _ := serveBoth(t, Config{IdleTimeout: 300 * time.Millisecond})
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := ctx30(t)
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for st := conn.GetState(); st == connectivity.Ready; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("the connection is still %v after 30 s with an idle timeout of 300 ms", st)
		}
	}
}

// TestGRPCGoMaxStreams: the grpc-go listener offers --grpc-max-streams
// streams per connection (1,000 by default, not --max-streams' 128): a
// gRPC client queues its calls on its one connection, so this is its
// concurrency; the peer's benchmark runs 200 calls on one.
func TestGRPCGoMaxStreams(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want uint32
	}{
		{Config{}, DefaultGRPCMaxStreams},
		{Config{GRPCMaxStreams: 7, MaxStreams: 9}, 7},
	} {
		s, _ := serveBoth(t, tc.cfg)
		if got := grpcSettings(t, s.GRPCAddr())[http2.SettingMaxConcurrentStreams]; got != tc.want {
			t.Errorf("GRPCMaxStreams %d: the listener offers %d streams, want %d", tc.cfg.GRPCMaxStreams, got, tc.want)
		}
	}
	cfg := Config{GRPCAddr: "127.0.0.1:0", Addr: "127.0.0.1:0", DataDir: t.TempDir(), GRPCMaxStreams: -1, Logger: slog.New(slog.DiscardHandler)}
	s, err := New(ctx30(t), cfg)
	if err == nil {
		err = s.Start()
		if err == nil {
			s.Shutdown()
		}
	}
	if err == nil || !strings.Contains(err.Error(), "--grpc-max-streams -1") {
		t.Fatalf("--grpc-max-streams -1: %v, want an error naming the flag", err)
	}
}

// grpcSettings opens an h2c connection to addr and returns the settings
// of the server's first SETTINGS frame.
func grpcSettings(t *testing.T, addr string) map[http2.SettingID]uint32 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			got := map[http2.SettingID]uint32{}
			sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			return got
		}
	}
}

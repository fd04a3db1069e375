package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/surge-run/surge/internal/api"
)

// A unary call admitted directly (no gate, no tracing: grpcEdge.unaryDirect)
// that panics is answered INTERNAL, counted and logged once per method,
// and gives its in-flight slot back: with one slot, every later call is
// still admitted directly instead of going through the chain.
func TestGRPCDirectUnaryPanicIsInternalAndFreesItsSlot(t *testing.T) {
	const method = "/jq.JobService/SubmitJob"
	var logged strings.Builder
	reg := prometheus.NewRegistry()
	e := &grpcEdge{
		direct: api.NewServer("127.0.0.1:0", http.NotFoundHandler(), api.Limits{MaxInflight: 1}, nil),
		chain: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Error("a call went through the chain: a panicked call kept its slot")
		}),
		logger: slog.New(slog.NewTextHandler(&logged, nil)),
		stats:  newGRPCStats(reg),
	}
	e.stats.methods = map[string]*methodStats{method: {seconds: e.stats.seconds.WithLabelValues(method)}}
	info := &grpc.UnaryServerInfo{FullMethod: method}
	boom := func(context.Context, any) (any, error) { panic("boom") }
	for range 3 {
		resp, err := e.unary(context.Background(), nil, info, boom)
		if resp != nil || status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "internal error") {
			t.Fatalf("a panicking call answered %v, %v; want INTERNAL", resp, err)
		}
	}
	resp, err := e.unary(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil })
	if resp != "ok" || err != nil {
		t.Fatalf("a call after the panics answered %v, %v", resp, err)
	}
	if n := strings.Count(logged.String(), "gRPC handler panicked"); n != 1 || !strings.Contains(logged.String(), "boom") {
		t.Errorf("logged %d panics (want the first only, with its value): %s", n, logged.String())
	}
	if got := counterValue(t, e.stats.panics.WithLabelValues(method)); got != 3 {
		t.Errorf("surge_grpc_panics_total = %v, want 3", got)
	}
	if got := counterValue(t, e.stats.calls.WithLabelValues(method, codes.Internal.String())); got != 3 {
		t.Errorf("surge_grpc_calls_total{code=Internal} = %v, want 3", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

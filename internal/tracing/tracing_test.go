package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Start with the standard variables exports over OTLP/HTTP: a traced
// request's server span reaches the receiver named by
// OTEL_EXPORTER_OTLP_ENDPOINT, with service.name surge, once Shutdown
// flushes.
func TestStartExportsOverOTLPHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []*collectortrace.ExportTraceServiceRequest
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, req) != nil {
			t.Errorf("receiver got %s %s (%d bytes), want an OTLP trace export", r.Method, r.URL.Path, len(b))
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	cfg := Config{SampleRatio: 1}
	if !cfg.Enabled() {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT set, yet tracing is not enabled")
	}
	tr, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var names, services []string
	for _, req := range got {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					services = append(services, a.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	if len(names) != 1 || names[0] != "GET" || len(services) != 1 || services[0] != ServiceName {
		t.Errorf("exported spans %v of services %v, want the one server span of %s", names, services, ServiceName)
	}
}

// The switches: off unless asked; OTEL_SDK_DISABLED wins; the protocol
// is grpc or http/protobuf; a ratio outside [0,1] is refused by name.
func TestConfig(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(v, "")
	}
	if (Config{SampleRatio: RatioFromEnv}).Enabled() {
		t.Error("on with nothing set")
	}
	if !(Config{On: true}).Enabled() {
		t.Error("--otel does not turn it on")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if (Config{On: true}).Enabled() {
		t.Error("OTEL_SDK_DISABLED=true does not turn it off")
	}
	for _, r := range []float64{-0.5, 1.5} {
		if err := (Config{SampleRatio: r}).Check(); err == nil || !strings.Contains(err.Error(), "--trace-sample-ratio") {
			t.Errorf("ratio %v: %v, want an error naming --trace-sample-ratio", r, err)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if tr, err := Start(context.Background(), Config{SampleRatio: 0.01}); err != nil {
		t.Errorf("grpc exporter: %v", err)
	} else {
		tr.Shutdown(context.Background())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := Start(context.Background(), Config{SampleRatio: 0.01}); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("protocol http/json: %v, want an error naming the variable", err)
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
	if r, atEdge, err := rootRatio(Config{SampleRatio: RatioFromEnv}); r != 0.25 || !atEdge || err != nil {
		t.Errorf("ratio from the environment: %v %v %v, want 0.25 at the edge", r, atEdge, err)
	}
}

package jaegertest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/tracing/jaegertest"
)

func TestMain(m *testing.M) { jaegertest.Main(m, kafkatest.Stop) }

// The kit reads back what an OpenTelemetry SDK sent, over either OTLP
// protocol: by trace id and by service and operation, each span with its
// parent, its links (also to another trace), its attributes and its
// service.
func TestKitReadsBackWhatTheSDKSent(t *testing.T) {
	j := jaegertest.Start(t)
	for _, p := range []jaegertest.Protocol{jaegertest.HTTP, jaegertest.GRPC} {
		t.Run(string(p), func(t *testing.T) {
			service := jaegertest.ServiceName(t)
			tp := provider(t, j, p, service)
			tracer := tp.Tracer("jaegertest")
			ctx := context.Background()
			_, other := tracer.Start(ctx, "other")
			other.End()
			ctx, root := tracer.Start(ctx, "root", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tracer.Start(ctx, "child", trace.WithLinks(trace.Link{SpanContext: other.SpanContext()}),
				trace.WithAttributes(attribute.Int("n", 7), attribute.String("s", "x"), attribute.Bool("b", true)))
			child.End()
			root.End()
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}

			id := root.SpanContext().TraceID().String()
			tr := j.Wait(t, id, "root", "child")
			r, c := tr.One(t, "root"), tr.One(t, "child")
			if tr.ID != id || r.TraceID != id || r.SpanID != root.SpanContext().SpanID().String() {
				t.Errorf("trace %s, root %s/%s: want %s/%s", tr.ID, r.TraceID, r.SpanID, id, root.SpanContext().SpanID())
			}
			if r.ParentID != "" || c.ParentID != r.SpanID {
				t.Errorf("root's parent %q (want none), child's %q (want %s)", r.ParentID, c.ParentID, r.SpanID)
			}
			if p, ok := tr.Span(c.ParentID); !ok || p.Name != "root" || len(tr.Children(r)) != 1 {
				t.Errorf("child's parent %v, root's children %v", p, tr.Children(r))
			}
			want := jaegertest.Ref{TraceID: other.SpanContext().TraceID().String(), SpanID: other.SpanContext().SpanID().String()}
			if len(c.Links) != 1 || c.Links[0] != want {
				t.Errorf("child's links %v, want %v", c.Links, want)
			}
			if c.Attrs["n"] != int64(7) || c.Attr("s") != "x" || c.Attrs["b"] != true || r.Attr("span.kind") != "server" {
				t.Errorf("child's attributes %v, root's %v", c.Attrs, r.Attrs)
			}
			if r.Service != service || r.Resource["service.instance.id"] != "i-1" {
				t.Errorf("root's service %q, resource %v; want %q with service.instance.id i-1", r.Service, r.Resource, service)
			}
			if c.Duration < 0 || c.Start.Before(r.Start) {
				t.Errorf("child %v+%v starts before root %v", c.Start, c.Duration, r.Start)
			}

			found := j.WaitFind(t, jaegertest.Query{Service: service, Operation: "child"}, "root")
			if found.ID != id {
				t.Errorf("Find(service, child) found trace %s, want %s", found.ID, id)
			}
			tagged := j.WaitFind(t, jaegertest.Query{Service: service, Tags: map[string]string{"s": "x"}})
			if tagged.ID != id {
				t.Errorf("Find(tag s=x) found trace %s, want %s", tagged.ID, id)
			}
		})
	}
}

// A trace Jaeger never got is ErrNotFound, and a search that matches
// nothing finds nothing.
func TestKitNotFound(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := j.Trace(ctx, "0af7651916cd43dd8448eb211c80319c"); err != jaegertest.ErrNotFound {
		t.Errorf("unknown trace: %v, want ErrNotFound", err)
	}
	traces, err := j.Find(ctx, jaegertest.Query{Service: jaegertest.ServiceName(t)})
	if err != nil || len(traces) != 0 {
		t.Errorf("unknown service: %d traces, %v", len(traces), err)
	}
}

// provider exports to j over p as service, synchronously enough for a
// test: ForceFlush sends everything.
func provider(t *testing.T, j *jaegertest.Jaeger, p jaegertest.Protocol, service string) *sdktrace.TracerProvider {
	t.Helper()
	ctx := context.Background()
	var exp sdktrace.SpanExporter
	var err error
	if p == jaegertest.GRPC {
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(j.OTLPGRPC))
	} else {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(j.OTLPHTTP+"/v1/traces"))
	}
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.instance.id", "i-1"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// The script starts Jaeger on the ports it is given (the docs' three
// commands use the usual ones), prints them, and stop ends it.
func TestScriptStartsOnGivenPortsAndStops(t *testing.T) {
	jaegertest.Start(t) // builds the binary once if needed
	root, err := jaegertest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(root, "scripts", "jaeger.sh")
	dir := t.TempDir()
	ports := []string{port(t), port(t), port(t)}
	cmd := exec.Command("bash", append([]string{sh, "start", dir}, ports...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SURGE_JAEGER_WATCH_PID=%d", os.Getpid()))
	out, err := cmd.Output()
	t.Cleanup(func() { _ = exec.Command("bash", sh, "stop", dir).Run() })
	if err != nil {
		t.Fatalf("jaeger.sh start: %v\n%s", err, out)
	}
	for i, v := range []string{jaegertest.EnvOTLPGRPC, jaegertest.EnvOTLPHTTP, jaegertest.EnvQueryURL} {
		if want := v + "=http://127.0.0.1:" + ports[i] + "\n"; !strings.Contains(string(out), want) {
			t.Errorf("start printed %q, want the line %q", out, want)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + ports[2] + "/api/services")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/services: %s", resp.Status)
	}
	if out, err := exec.Command("bash", sh, "stop", dir).CombinedOutput(); err != nil {
		t.Fatalf("jaeger.sh stop: %v\n%s", err, out)
	}
	for _, p := range ports {
		if c, err := net.Dial("tcp", "127.0.0.1:"+p); err == nil {
			c.Close()
			t.Errorf("127.0.0.1:%s still accepts connections after stop", p)
		}
	}
}

// port is a free port on 127.0.0.1, for the script to listen on.
func port(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

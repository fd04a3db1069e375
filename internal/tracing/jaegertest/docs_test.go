package jaegertest_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/surge-run/surge/internal/tracing/jaegertest"
)

// The three commands in docs/OBSERVABILITY.md and the Grafana datasource
// agree on Jaeger's ports: Surge exports to the OTLP ports the Jaeger
// command opens, and Grafana reads the query port it opens.
func TestThreeCommandsAgreeOnPorts(t *testing.T) {
	root, err := jaegertest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc := read(t, filepath.Join(root, "docs", "OBSERVABILITY.md"))
	start := match(t, doc, `scripts/jaeger\.sh start \S+ (\d+) (\d+) (\d+)`)
	grpc, http, query := start[1], start[2], start[3]
	if got := match(t, doc, `OTEL_EXPORTER_OTLP_ENDPOINT=http://127\.0\.0\.1:(\d+) \./bin/surge serve`)[1]; got != http {
		t.Errorf("the docs' surge serve exports to port %s, the Jaeger command's OTLP/HTTP port is %s", got, http)
	}
	if got := match(t, doc, `OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_EXPORTER_OTLP_ENDPOINT=http://127\.0\.0\.1:(\d+)`)[1]; got != grpc {
		t.Errorf("the docs' gRPC export goes to port %s, the Jaeger command's OTLP/gRPC port is %s", got, grpc)
	}
	ds := read(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "jaeger.yml"))
	match(t, ds, `(?m)^\s+type: jaeger$`)
	if got := match(t, ds, `(?m)^\s+url: http://127\.0\.0\.1:(\d+)$`)[1]; got != query {
		t.Errorf("the Grafana Jaeger datasource reads port %s, the Jaeger command's query port is %s", got, query)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func match(t *testing.T, text, re string) []string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %q in the file", re)
	}
	return m
}

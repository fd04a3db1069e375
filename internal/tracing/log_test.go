package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// JSON lines about a traced request carry its trace and span ids; lines
// without one carry none; an unknown format is refused by name.
func TestJSONLogCarriesTraceID(t *testing.T) {
	var buf bytes.Buffer
	lg, err := NewLogger(&buf, LogJSON)
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	lg.With("route", "r").ErrorContext(ctx, "about a request")
	lg.Info("not about one")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %q", buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != tid.String() || first["span_id"] != sid.String() || first["route"] != "r" {
		t.Errorf("line about a traced request: %v", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("line about no request has a trace id: %v", second)
	}
	if _, err := NewLogger(&buf, "xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("format xml: %v, want an error naming --log-format", err)
	}
}

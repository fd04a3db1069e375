package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
	"github.com/surge-run/surge/internal/tracing"
)

// tracedNode starts a node that traces every request into its own
// in-memory exporter.
func tracedNode(t *testing.T, brokers, name, id string) (*testNode, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), tracing.IDGenerator())
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	n := startNodeWith(t, brokers, name, id, 2*time.Second, func(c *server.Config) { c.Tracer = tracing.New(tp) })
	return n, exp
}

func postOK(t *testing.T, url, body string, hdr map[string]string) map[string]any {
	t.Helper()
	st, b := do(t, "POST", url, body, hdr)
	if st/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, st, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, b)
	}
	return v
}

// A commerce saga across two nodes is one trace: its spans, made by both
// nodes, form one tree under the POST's server span on the node that
// took it; a forwarded request's engine spans on its owner are children
// of that server span; a step on one node is the parent of the step its
// message causes on the other. Orders are made until one's partitions
// (order, products, payment) are split between the nodes and the order's
// own partition is owned by the node that did not take the POST.
func TestSagaTraceAcrossTwoNodes(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "xtrace")
	a, expA := tracedNode(t, brokers, name, "a")
	b, expB := tracedNode(t, brokers, name, "b")
	waitDivided(t, []*testNode{a, b})
	c := postOK(t, a.base+"/api/customers", `{"email":"a@b.c","name":"Ann"}`, nil)
	for attempt := range 30 {
		var items []string
		for i := range 3 {
			p := postOK(t, a.base+"/api/products", fmt.Sprintf(`{"sku":"x%d-%d","name":"n","price":9.99,"quantityOnHand":5}`, attempt, i), nil)
			items = append(items, `{"productId":"`+p["productId"].(string)+`","quantity":1,"unitPrice":"10.00"}`)
		}
		traceID := fmt.Sprintf("%032x", 0xabc000+attempt)
		parent := "00-" + traceID + "-00f067aa0ba902b7-01"
		postOK(t, a.base+"/api/orders", `{"customerId":"`+c["customerId"].(string)+`","lineItems":[`+strings.Join(items, ",")+`]}`, map[string]string{"traceparent": parent})
		id, _ := trace.TraceIDFromHex(traceID)
		spansA, spansB := waitSaga(t, id, expA, expB)
		if !forwardedOrder(spansB) || !hasStep(spansA) || !hasStep(spansB) {
			t.Logf("attempt %d: order not forwarded, or every step on one node; again: a %v b %v", attempt, names(spansA), names(spansB))
			continue
		}
		all := append(append(tracetest.SpanStubs{}, spansA...), spansB...)
		checkOneTree(t, all, "00f067aa0ba902b7")
		post := byName(spansA, "POST /api/orders")
		for _, s := range spansB {
			if s.Name == "engine.queue" && s.Parent.SpanID() != post.SpanContext.SpanID() {
				t.Errorf("node b's engine.queue: parent %s, want node a's server span %s", s.Parent.SpanID(), post.SpanContext.SpanID())
			}
		}
		crossed := false
		idsA := map[trace.SpanID]bool{}
		for _, s := range spansA {
			idsA[s.SpanContext.SpanID()] = true
		}
		for _, s := range spansB {
			if strings.HasPrefix(s.Name, "engine.message") && idsA[s.Parent.SpanID()] && s.Parent.SpanID() != post.SpanContext.SpanID() {
				crossed = true
			}
		}
		if !crossed {
			t.Errorf("no step on node b is the child of a step on node a")
		}
		noCallSpans(t, expA, expB)
		return
	}
	t.Fatal("no order in 30 was split between the nodes")
}

// noCallSpans: the calls between the nodes (which carried this saga's
// forwarded order and messages) made no server span: their work is in
// the trace of the request that caused it, and a span of their own would
// be the root of a trace of nothing.
func noCallSpans(t *testing.T, exps ...*tracetest.InMemoryExporter) {
	t.Helper()
	var got []string
	for _, e := range exps {
		for _, s := range e.GetSpans() {
			for _, a := range s.Attributes {
				if a.Key == "url.path" && a.Value.AsString() == cluster.CallPath {
					got = append(got, fmt.Sprintf("%q (trace %s, parent %s)", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID()))
				}
			}
		}
	}
	if len(got) > 0 {
		t.Errorf("%d spans of the node-to-node route %s, e.g. %s", len(got), cluster.CallPath, got[0])
	}
}

// waitSaga waits (up to 30 s) for trace id's commits (one per product)
// over both exporters, and returns each node's spans of it.
func waitSaga(t *testing.T, id trace.TraceID, expA, expB *tracetest.InMemoryExporter) (tracetest.SpanStubs, tracetest.SpanStubs) {
	t.Helper()
	of := func(e *tracetest.InMemoryExporter) tracetest.SpanStubs {
		var out tracetest.SpanStubs
		for _, s := range e.GetSpans() {
			if s.SpanContext.TraceID() == id {
				out = append(out, s)
			}
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, b := of(expA), of(expB)
		commits := 0
		for _, s := range append(append(tracetest.SpanStubs{}, a...), b...) {
			if s.Name == "engine.message CommitForOrder" {
				commits++
			}
		}
		if commits == 3 {
			return a, b
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d commits after 30 s; spans a %v b %v", id, commits, names(a), names(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(ss tracetest.SpanStubs) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func byName(ss tracetest.SpanStubs, n string) tracetest.SpanStub {
	for _, s := range ss {
		if s.Name == n {
			return s
		}
	}
	return tracetest.SpanStub{}
}

// forwardedOrder: the node that did not take the POST applied the order.
func forwardedOrder(ss tracetest.SpanStubs) bool {
	for _, s := range ss {
		if s.Name == "engine.apply" {
			return true
		}
	}
	return false
}

func hasStep(ss tracetest.SpanStubs) bool {
	for _, s := range ss {
		if strings.HasPrefix(s.Name, "engine.message") {
			return true
		}
	}
	return false
}

// checkOneTree: every span's parent is in the trace, but the root's,
// which is the caller's.
func checkOneTree(t *testing.T, ss tracetest.SpanStubs, caller string) {
	t.Helper()
	ids := map[trace.SpanID]bool{}
	for _, s := range ss {
		ids[s.SpanContext.SpanID()] = true
	}
	for _, s := range ss {
		if !ids[s.Parent.SpanID()] && s.Parent.SpanID().String() != caller {
			t.Errorf("span %q: parent %s is in neither node's spans", s.Name, s.Parent.SpanID())
		}
	}
	if len(ss) == 0 {
		t.Error("no spans")
	}
}

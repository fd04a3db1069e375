package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// postJSON posts body with traceparent (if any) and decodes the answer.
func postJSON(t *testing.T, url, body, traceparent string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s %s", url, resp.Status, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, b)
	}
	return v
}

// traceSpans waits (up to 30 s) until trace id holds a span for each
// name in want (a name twice: two spans), and returns all its spans.
func traceSpans(t *testing.T, exp func() tracetest.SpanStubs, id trace.TraceID, want ...string) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got tracetest.SpanStubs
		count := map[string]int{}
		for _, s := range exp() {
			if s.SpanContext.TraceID() == id {
				got = append(got, s)
				count[s.Name]++
			}
		}
		need := map[string]int{}
		for _, n := range want {
			need[n]++
		}
		missing := []string{}
		for n, c := range need {
			if count[n] < c {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: missing %v among %v", id, missing, count)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkTree: every span of the trace but the caller's root has its parent
// in the trace (no step hangs loose), and each span named child has a
// parent named as parents[child] says.
func checkTree(t *testing.T, spans tracetest.SpanStubs, rootParent string, parents map[string]string) {
	t.Helper()
	byID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID().String()] = s
	}
	for _, s := range spans {
		p := s.Parent.SpanID().String()
		par, ok := byID[p]
		if !ok {
			if p != rootParent {
				t.Errorf("span %q: parent %s is not in the trace", s.Name, p)
			}
			continue
		}
		if want, ok := parents[s.Name]; ok && par.Name != want {
			t.Errorf("span %q: parent %q, want %q", s.Name, par.Name, want)
		}
	}
}

// sagaOrder makes a customer and products with the given stock, and
// orders one of each with the caller's traceparent; it returns the
// order's answer.
func sagaOrder(t *testing.T, base, traceparent string, stock ...int) map[string]any {
	t.Helper()
	c := postJSON(t, base+"/api/customers", `{"email":"a@b.c","name":"Ann"}`, "")
	var items []string
	for i, n := range stock {
		p := postJSON(t, base+"/api/products", `{"sku":"s`+string(rune('a'+i))+`","name":"n","price":9.99,"quantityOnHand":`+itoa(n)+`}`, "")
		items = append(items, `{"productId":"`+p["productId"].(string)+`","quantity":1,"unitPrice":"10.00"}`)
	}
	return postJSON(t, base+"/api/orders", `{"customerId":"`+c["customerId"].(string)+`","lineItems":[`+strings.Join(items, ",")+`]}`, traceparent)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The spans of a commerce saga's steps, named after the messages.
const (
	spanReserve  = "engine.message ReserveForOrder"
	spanReserved = "engine.message StockReserved"
	spanFailed   = "engine.message StockFailed"
	spanPay      = "engine.message ProcessPaymentForOrder"
	spanPaid     = "engine.message PaymentProcessed"
	spanCommit   = "engine.message CommitForOrder"
	spanRelease  = "engine.message ReleaseForOrder"
	spanOrder    = "POST /api/orders"
)

// A commerce order's saga is one trace: the POST's server span, under it
// a reservation step on each product, each product's answer a child of
// its reservation, the payment a child of the last answer, its answer a
// child of the payment, and the commit on each product a child of that.
func TestTraceSagaIsOneTrace(t *testing.T) {
	base, exp := tracedServer(t)
	sagaOrder(t, base, clientParent, 5, 5)
	id, _ := trace.TraceIDFromHex(clientTraceID)
	spans := traceSpans(t, exp.GetSpans, id, spanOrder, spanReserve, spanReserve, spanReserved, spanReserved,
		spanPay, spanPaid, spanCommit, spanCommit)
	logSpans(t, spans)
	checkTree(t, spans, clientSpanID, map[string]string{spanReserve: spanOrder, spanReserved: spanReserve,
		spanPay: spanReserved, spanPaid: spanPay, spanCommit: spanPaid})
}

// A saga that compensates is one trace too: one product is out of stock,
// its StockFailed cancels the order, whose releases go to every product.
func TestTraceSagaCompensationIsOneTrace(t *testing.T) {
	base, exp := tracedServer(t)
	sagaOrder(t, base, clientParent, 5, 0)
	id, _ := trace.TraceIDFromHex(clientTraceID)
	spans := traceSpans(t, exp.GetSpans, id, spanOrder, spanReserve, spanReserve, spanFailed, spanRelease, spanRelease)
	checkTree(t, spans, clientSpanID, map[string]string{spanReserve: spanOrder, spanFailed: spanReserve, spanRelease: spanFailed})
	for _, s := range spans {
		if s.Name == spanPay || s.Name == spanCommit {
			t.Errorf("a compensated saga has a %q step", s.Name)
		}
	}
}

func logSpans(t *testing.T, spans tracetest.SpanStubs) {
	for _, s := range spans {
		t.Logf("%s %s ← %s", s.SpanContext.SpanID(), s.Name, s.Parent.SpanID())
	}
}

// A sequencer message published in a trace, processed, then held behind
// a gap until a later publish fills it and completes: its release, in
// that later batch, is a step of its publish's trace, a child of the
// publish's server span. The message that filled the gap, untraced, adds
// nothing.
func TestTraceSequencerHeldMessageRelease(t *testing.T) {
	base, exp := tracedServer(t)
	g := base + "/v1/groups/xt"
	postJSON(t, g+"/messages", `{"id":"m2","seq":2,"payload":{"n":2}}`, clientParent)
	postJSON(t, g+"/lease", `{"processor":"p","max":10,"leaseMs":30000}`, "")
	postJSON(t, g+"/complete", `{"processor":"p","seqs":[2]}`, "")
	postJSON(t, g+"/messages", `{"id":"m1","seq":1,"payload":{"n":1}}`, "")
	postJSON(t, g+"/lease", `{"processor":"p","max":10,"leaseMs":30000}`, "")
	done := postJSON(t, g+"/complete", `{"processor":"p","seqs":[1]}`, "")
	if pos, _ := done["position"].(float64); pos != 2 {
		t.Fatalf("completing 1 answered %v, want position 2 (both released)", done)
	}
	id, _ := trace.TraceIDFromHex(clientTraceID)
	pub := "POST /v1/groups/{group}/messages"
	spans := traceSpans(t, exp.GetSpans, id, pub, "sequencer.release")
	checkTree(t, spans, clientSpanID, map[string]string{"sequencer.release": pub})
	n := 0
	for _, s := range spans {
		if s.Name == "sequencer.release" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d release steps in the trace, want 1", n)
	}
}

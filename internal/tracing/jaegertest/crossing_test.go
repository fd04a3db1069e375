package jaegertest_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/tracing/jaegertest"
)

// The spans of a commerce saga's steps (docs/OBSERVABILITY.md), named
// after the messages.
const (
	spanOrder    = "POST /api/orders"
	spanReserve  = "engine.message ReserveForOrder"
	spanReserved = "engine.message StockReserved"
	spanFailed   = "engine.message StockFailed"
	spanPay      = "engine.message ProcessPaymentForOrder"
	spanPaid     = "engine.message PaymentProcessed"
	spanCommit   = "engine.message CommitForOrder"
	spanRelease  = "engine.message ReleaseForOrder"
)

// sagaProducts is how many products an order of the saga tests takes:
// with the order's and the payment's partitions, enough that a split
// between two nodes is likely on the first attempt.
const sagaProducts = 3

// sagaAttempts bounds the orders the saga tests make until one's steps
// run on both nodes.
const sagaAttempts = 10

// A commerce order taken by node a of a two-node cluster on Kafka, whose
// saga runs on both nodes, is one trace in Jaeger: the POST's server span
// on node a (the caller's child), one reservation step per product under
// it, each product's answer under its reservation, the payment under an
// answer, its answer under the payment and one commit per product under
// that; steps made by both nodes, and every span's parent in the trace.
// A second order, with a product out of stock, compensates: each
// StockFailed under its reservation and the releases under a StockFailed,
// no payment and no commit.
func TestSagaAcrossNodesInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	brokers, cluster := kafkatest.Brokers(t), kafkatest.Topic(t, "jsaga")
	nodes := []jaegertest.Server{
		j.Serve(t, jaegertest.HTTP, "--kafka", brokers, "--cluster", cluster, "--node-id", "a", "--partitions", fmt.Sprint(clusterPartitions)),
		j.Serve(t, jaegertest.GRPC, "--kafka", brokers, "--cluster", cluster, "--node-id", "b", "--partitions", fmt.Sprint(clusterPartitions)),
	}
	waitShared(t, nodes)
	var c map[string]any
	decode(t, send(t, "POST", nodes[0].URL+"/api/customers", `{"email":"a@b.c","name":"Ann"}`, "", 201), &c)
	customer := c["customerId"].(string)
	t.Run("confirmed", func(t *testing.T) {
		want := map[string]int{spanOrder: 1, spanReserve: sagaProducts, spanReserved: sagaProducts, spanPay: 1, spanPaid: 1, spanCommit: sagaProducts}
		tr := splitSaga(t, j, nodes, customer, 5, want)
		checkParents(t, tr, map[string]string{spanReserve: spanOrder, spanReserved: spanReserve, spanPay: spanReserved, spanPaid: spanPay, spanCommit: spanPaid})
	})
	t.Run("compensated", func(t *testing.T) {
		want := map[string]int{spanOrder: 1, spanReserve: sagaProducts, spanFailed: 1, spanRelease: sagaProducts}
		tr := splitSaga(t, j, nodes, customer, 0, want)
		checkParents(t, tr, map[string]string{spanReserve: spanOrder, spanFailed: spanReserve, spanRelease: spanFailed})
		for _, n := range []string{spanPay, spanCommit} {
			if len(tr.Named(n)) > 0 {
				t.Errorf("a compensated saga has a %q step; trace %s", n, tr)
			}
		}
	})
	// The calls that carried the sagas between the nodes made no span:
	// Jaeger, which has the sagas' spans now, knows no such operation.
	for _, n := range nodes {
		var ops struct{ Data []string }
		decode(t, send(t, "GET", j.Query+"/api/services/"+url.PathEscape(n.Service)+"/operations", "", "", 200), &ops)
		if slices.Contains(ops.Data, callRoute) {
			t.Errorf("%s's operations %v include the node-to-node route %s", n.Service, ops.Data, callRoute)
		}
	}
}

// callRoute is the route of the calls between cluster nodes
// (cluster.CallPath).
const callRoute = "/internal/cluster/v1/call"

// splitSaga orders sagaProducts new products (the last with lastStock in
// stock, the others with plenty) on nodes[0] with a traceparent until the
// saga's steps run on both nodes, and returns that order's trace, once
// it holds want (span name: how many), checked to be one tree under the
// caller's span with the POST's server span on nodes[0].
func splitSaga(t *testing.T, j *jaegertest.Jaeger, nodes []jaegertest.Server, customer string, lastStock int, want map[string]int) jaegertest.Trace {
	t.Helper()
	for attempt := range sagaAttempts {
		var items []string
		for i := range sagaProducts {
			stock := 5
			if i == sagaProducts-1 {
				stock = lastStock
			}
			var p map[string]any
			decode(t, send(t, "POST", nodes[0].URL+"/api/products", fmt.Sprintf(`{"sku":"%s-%d-%d","name":"n","price":9.99,"quantityOnHand":%d}`, t.Name(), attempt, i, stock), "", 201), &p)
			items = append(items, `{"productId":"`+p["productId"].(string)+`","quantity":1,"unitPrice":"10.00"}`)
		}
		parent := newParent(t)
		send(t, "POST", nodes[0].URL+"/api/orders", `{"customerId":"`+customer+`","lineItems":[`+strings.Join(items, ",")+`]}`, parent.header(), 201)
		tr := waitCounts(t, j, parent.traceID, want)
		if !stepsOn(tr, nodes[0].Service) || !stepsOn(tr, nodes[1].Service) {
			t.Logf("attempt %d: every step on one node; again", attempt)
			continue
		}
		post := tr.One(t, spanOrder)
		if post.Service != nodes[0].Service || post.ParentID != parent.spanID || post.Attr("span.kind") != "server" {
			t.Errorf("%s: service %s, parent %s, kind %s; want node a's server span, the caller's (%s) child", spanOrder, post.Service, post.ParentID, post.Attr("span.kind"), parent.spanID)
		}
		for _, s := range tr.Spans {
			if s.ParentID != parent.spanID && !hasParent(tr, s) {
				t.Errorf("%s (%s, of %s): parent %s is not in the trace; trace %s", s.Name, s.SpanID, s.Service, s.ParentID, tr)
			}
			if s.Attr("url.path") == callRoute {
				t.Errorf("a span of the node-to-node route in the saga's trace: %s (%s)", s.Name, s.SpanID)
			}
		}
		return tr
	}
	t.Fatalf("no order in %d had its saga's steps on both nodes", sagaAttempts)
	return jaegertest.Trace{}
}

// stepsOn reports whether service made one of tr's saga steps.
func stepsOn(tr jaegertest.Trace, service string) bool {
	for _, s := range tr.Spans {
		if s.Service == service && strings.HasPrefix(s.Name, "engine.message ") {
			return true
		}
	}
	return false
}

func hasParent(tr jaegertest.Trace, s jaegertest.Span) bool {
	_, ok := tr.Span(s.ParentID)
	return ok
}

// checkParents: every span named child in tr has a parent named
// parents[child].
func checkParents(t *testing.T, tr jaegertest.Trace, parents map[string]string) {
	t.Helper()
	for child, want := range parents {
		for _, s := range tr.Named(child) {
			p, ok := tr.Span(s.ParentID)
			if !ok || p.Name != want {
				t.Errorf("%s (%s, of %s): parent %q (%s), want a %q; trace %s", child, s.SpanID, s.Service, p.Name, s.ParentID, want, tr)
			}
		}
	}
}

// waitCounts waits until trace id holds at least want[name] spans of each
// name, for up to jaegertest.WaitTimeout, and returns it.
func waitCounts(t *testing.T, j *jaegertest.Jaeger, id string, want map[string]int) jaegertest.Trace {
	t.Helper()
	deadline := time.Now().Add(jaegertest.WaitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tr, err := j.Trace(ctx, id)
		cancel()
		var missing []string
		for n, c := range want {
			if got := len(tr.Named(n)); got < c {
				missing = append(missing, fmt.Sprintf("%s (%d of %d)", n, got, c))
			}
		}
		if err == nil && len(missing) == 0 {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s after %v: err %v, missing %v; trace %s", id, jaegertest.WaitTimeout, err, missing, tr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A job submitted through the Go client from inside a span, run by a real
// `surge worker` exporting to Jaeger too, is one trace: the client's span
// → the submit's server span → jobs.dispatch (server) → job.execute (the
// worker's service) → the report's server span; the command's
// TRACEPARENT names job.execute.
func TestWorkerJobInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	srv := j.Serve(t, jaegertest.HTTP)
	worker := j.Worker(t, jaegertest.GRPC, srv, "--concurrency", "1")
	parent := newParent(t)
	tid, _ := trace.TraceIDFromHex(parent.traceID)
	sid, _ := trace.SpanIDFromHex(parent.spanID)
	ctx, cancel := context.WithTimeout(context.Background(), jaegertest.WaitTimeout)
	defer cancel()
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	c := jobclient.New(srv.URL)
	id, err := c.Submit(ctx, "default", []byte(`{"command":["sh","-c","printf %s \"$TRACEPARENT\""]}`), jobclient.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job := waitDone(ctx, t, c, id)
	submit, dispatch, exec, report := "jq.JobService/SubmitJob", "jobs.dispatch", "job.execute", "jq.WorkerService/ReportResult"
	tr := j.Wait(t, parent.traceID, submit, dispatch, exec, report)
	s, d, e := tr.One(t, submit), tr.One(t, dispatch), tr.One(t, exec)
	if s.ParentID != parent.spanID || s.Service != srv.Service {
		t.Errorf("%s: parent %s of %s, want the client's span %s, on the server %s", submit, s.ParentID, s.Service, parent.spanID, srv.Service)
	}
	if d.ParentID != s.SpanID || d.Service != srv.Service {
		t.Errorf("%s: parent %s of %s, want the submit's %s on the server", dispatch, d.ParentID, d.Service, s.SpanID)
	}
	if e.ParentID != d.SpanID || e.Service != worker || e.Attr("surge.job.id") != id {
		t.Errorf("%s: parent %s of %s, job %s; want the dispatch's %s, of the worker %s, job %s", exec, e.ParentID, e.Service, e.Attr("surge.job.id"), d.SpanID, worker, id)
	}
	reported := false
	for _, r := range tr.Named(report) {
		reported = reported || (r.ParentID == e.SpanID && r.Service == srv.Service)
	}
	if !reported {
		t.Errorf("no %s of the server under %s; trace %s", report, exec, tr)
	}
	if got, want := string(job.Result), "00-"+parent.traceID+"-"+e.SpanID+"-01"; got != want {
		t.Errorf("the command's TRACEPARENT %q, want %q (job.execute)", got, want)
	}
}

// waitDone waits for job id to be done, and returns it.
func waitDone(ctx context.Context, t *testing.T, c *jobclient.Client, id string) jobclient.JobInfo {
	t.Helper()
	for {
		job, err := c.Get(ctx, id)
		if err == nil && job.Status == jobclient.StatusDone {
			return job
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s not done: %+v, %v", id, job, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A sequencer message published with a traceparent, held behind a gap
// and released when a later, untraced publish fills the gap: its publish
// and its one sequencer.release, the publish's child, are in the caller's
// trace in Jaeger.
func TestSequencerReleaseInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	srv := j.Serve(t, jaegertest.GRPC)
	g := srv.URL + "/v1/groups/js"
	parent := newParent(t)
	send(t, "POST", g+"/messages", `{"id":"m2","seq":2,"payload":{"n":2}}`, parent.header(), 201)
	send(t, "POST", g+"/lease", `{"processor":"p","max":10,"leaseMs":30000}`, "", 200)
	send(t, "POST", g+"/complete", `{"processor":"p","seqs":[2]}`, "", 200)
	send(t, "POST", g+"/messages", `{"id":"m1","seq":1,"payload":{"n":1}}`, "", 201)
	send(t, "POST", g+"/lease", `{"processor":"p","max":10,"leaseMs":30000}`, "", 200)
	var done map[string]any
	decode(t, send(t, "POST", g+"/complete", `{"processor":"p","seqs":[1]}`, "", 200), &done)
	if pos, _ := done["position"].(float64); pos != 2 {
		t.Fatalf("completing 1 answered %v, want position 2 (both released)", done)
	}
	pub, rel := "POST /v1/groups/{group}/messages", "sequencer.release"
	tr := j.Wait(t, parent.traceID, pub, rel)
	p, r := tr.One(t, pub), tr.One(t, rel)
	if p.ParentID != parent.spanID || p.Service != srv.Service {
		t.Errorf("%s: parent %s of %s, want the caller's %s", pub, p.ParentID, p.Service, parent.spanID)
	}
	if r.ParentID != p.SpanID || r.Service != srv.Service {
		t.Errorf("%s: parent %s of %s, want the publish's %s", rel, r.ParentID, r.Service, p.SpanID)
	}
}

package jaegertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/tracing/jaegertest"
)

// engineSpans are the spans of a command's way through its partition,
// each a child of the request's server span (docs/OBSERVABILITY.md).
var engineSpans = []string{"engine.queue", "engine.apply", "engine.commit_wait", "engine.reply"}

// groupCommitAttrs are what log.group_commit says of its batch.
var groupCommitAttrs = []string{"surge.batch.inputs", "surge.batch.records", "surge.batch.bytes", "surge.log.sync_ns"}

// A real `surge serve` exporting over each OTLP protocol to a real Jaeger:
// one request of each workload is found there, its server span (the
// caller's child when it sent a traceparent, the root otherwise, named in
// traceresponse) with the engine's spans under it and the commit wait
// linked to its batch's group commit.
func TestWorkloadTracesInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	for _, p := range []jaegertest.Protocol{jaegertest.HTTP, jaegertest.GRPC} {
		t.Run(string(p), func(t *testing.T) {
			srv := j.Serve(t, p)
			t.Run("ticketing-compat", func(t *testing.T) { ticketingCompat(t, j, srv) })
			t.Run("ticketing-native", func(t *testing.T) { ticketingNative(t, j, srv) })
			t.Run("commerce-order", func(t *testing.T) { commerceOrder(t, j, srv) })
			t.Run("jobs-submit-grpc", func(t *testing.T) { jobSubmit(t, j, srv) })
			t.Run("sequencer-publish", func(t *testing.T) { sequencerPublish(t, j, srv) })
			t.Run("grafana-lists", func(t *testing.T) { grafanaLists(t, j, srv) })
		})
	}
}

// ticketingCompat: POST /v1/event/{id}/reservation with a traceparent
// lands in the caller's trace.
func ticketingCompat(t *testing.T, j *jaegertest.Jaeger, srv jaegertest.Server) {
	send(t, "POST", srv.URL+"/v1/event", `{"eventName":"jc","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`, "", 200)
	parent := newParent(t)
	h := send(t, "POST", srv.URL+"/v1/event/jc/reservation", `{"userId":"u1","eventId":"jc","areaId":"A","numOfSeats":2,"type":"RANDOM"}`, parent.header(), 200)
	tr := waitRequest(t, j, parent.traceID, "POST /v1/event/{id}/reservation")
	checkRequest(t, j, tr, "POST /v1/event/{id}/reservation", srv, parent, h.header)
}

// ticketingNative: POST /v2/reservations without a traceparent starts a
// trace, found by the server's service and the route.
func ticketingNative(t *testing.T, j *jaegertest.Jaeger, srv jaegertest.Server) {
	send(t, "POST", srv.URL+"/v1/event", `{"eventName":"jn","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`, "", 200)
	h := send(t, "POST", srv.URL+"/v2/reservations", `{"userId":"u1","eventId":"jn","areaId":"A","numOfSeats":1,"type":"RANDOM"}`, "", 201)
	name := "POST /v2/reservations"
	tr := j.WaitFind(t, jaegertest.Query{Service: srv.Service, Operation: name}, append([]string{name}, engineSpans...)...)
	checkRequest(t, j, tr, name, srv, traceParent{}, h.header)
}

// commerceOrder: POST /api/orders with a traceparent.
func commerceOrder(t *testing.T, j *jaegertest.Jaeger, srv jaegertest.Server) {
	var c, p map[string]any
	decode(t, send(t, "POST", srv.URL+"/api/customers", `{"email":"a@b.c","name":"Ann"}`, "", 201), &c)
	decode(t, send(t, "POST", srv.URL+"/api/products", `{"sku":"s","name":"n","price":9.99,"quantityOnHand":100}`, "", 201), &p)
	parent := newParent(t)
	body := `{"customerId":"` + c["customerId"].(string) + `","lineItems":[{"productId":"` + p["productId"].(string) + `","quantity":1}]}`
	h := send(t, "POST", srv.URL+"/api/orders", body, parent.header(), 201)
	tr := waitRequest(t, j, parent.traceID, "POST /api/orders")
	checkRequest(t, j, tr, "POST /api/orders", srv, parent, h.header)
}

// jobSubmit: jq.JobService/SubmitJob over gRPC, the traceparent in the
// call's metadata.
func jobSubmit(t *testing.T, j *jaegertest.Jaeger, srv jaegertest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	client := jqpbconnect.NewJobServiceClient(&http.Client{Transport: &http.Transport{Protocols: &protos}}, srv.URL, connect.WithGRPC())
	parent := newParent(t)
	req := connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{"n":1}`)})
	req.Header().Set("traceparent", parent.header())
	res, err := client.SubmitJob(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	name := "jq.JobService/SubmitJob"
	tr := waitRequest(t, j, parent.traceID, name)
	s := checkRequest(t, j, tr, name, srv, parent, res.Header())
	if s.Attr("rpc.system") == "" || s.Attr("rpc.method") == "" {
		t.Errorf("%s: no rpc.system/rpc.method: %v", name, s.Attrs)
	}
}

// sequencerPublish: POST /v1/groups/{group}/messages with a traceparent.
func sequencerPublish(t *testing.T, j *jaegertest.Jaeger, srv jaegertest.Server) {
	parent := newParent(t)
	h := send(t, "POST", srv.URL+"/v1/groups/jg/messages", `{"id":"m1","payload":{"n":1}}`, parent.header(), 201)
	name := "POST /v1/groups/{group}/messages"
	tr := waitRequest(t, j, parent.traceID, name)
	checkRequest(t, j, tr, name, srv, parent, h.header)
}

// grafanaLists: what Grafana's Jaeger datasource lists to search by,
// /api/services and /api/services/{service}/operations, name the server
// and its routes.
func grafanaLists(t *testing.T, j *jaegertest.Jaeger, srv jaegertest.Server) {
	t.Helper()
	var services, ops struct{ Data []string }
	decode(t, send(t, "GET", j.Query+"/api/services", "", "", 200), &services)
	decode(t, send(t, "GET", j.Query+"/api/services/"+url.PathEscape(srv.Service)+"/operations", "", "", 200), &ops)
	if !slices.Contains(services.Data, srv.Service) {
		t.Errorf("/api/services %v lacks %s", services.Data, srv.Service)
	}
	for _, op := range []string{"POST /v1/event/{id}/reservation", "POST /v2/reservations", "POST /api/orders", "jq.JobService/SubmitJob", "POST /v1/groups/{group}/messages", "log.group_commit"} {
		if !slices.Contains(ops.Data, op) {
			t.Errorf("%s's operations %v lack %s", srv.Service, ops.Data, op)
		}
	}
}

// waitRequest waits for trace id to hold the server span and every engine
// span.
func waitRequest(t *testing.T, j *jaegertest.Jaeger, id, server string) jaegertest.Trace {
	t.Helper()
	return j.Wait(t, id, append([]string{server}, engineSpans...)...)
}

// checkRequest checks the request's server span in tr (from srv, the
// caller's child if parent is set, named by the answer's traceresponse)
// and the engine's spans under it, and returns the server span.
func checkRequest(t *testing.T, j *jaegertest.Jaeger, tr jaegertest.Trace, name string, srv jaegertest.Server, parent traceParent, got http.Header) jaegertest.Span {
	t.Helper()
	s := tr.One(t, name)
	if s.Attr("span.kind") != "server" || s.Service != srv.Service {
		t.Errorf("%s: kind %q, service %q; want a server span of %s", name, s.Attr("span.kind"), s.Service, srv.Service)
	}
	if want := parent.spanID; s.ParentID != want {
		t.Errorf("%s: parent %q, want %q (the caller's span, or none)", name, s.ParentID, want)
	}
	if tresp, want := got.Get("traceresponse"), "00-"+tr.ID+"-"+s.SpanID+"-01"; tresp != want {
		t.Errorf("%s: traceresponse %q, want %q", name, tresp, want)
	}
	children := map[string][]jaegertest.Span{}
	for _, c := range tr.Children(s) {
		children[c.Name] = append(children[c.Name], c)
	}
	for _, n := range engineSpans {
		if len(children[n]) == 0 {
			t.Errorf("%s has no child %s; trace %s", name, n, tr)
		}
	}
	for _, w := range children["engine.commit_wait"] {
		checkGroupCommit(t, j, tr, w)
	}
	// Spans of work the request started elsewhere (a saga's steps, a
	// job's run) may join the trace; each must hang under this request.
	for _, o := range tr.Spans {
		if o.SpanID != s.SpanID && !descends(tr, o, s.SpanID) && (parent.spanID == "" || !descends(tr, o, parent.spanID)) {
			t.Errorf("%s (%s) descends from neither the server span nor the caller's; trace %s", o.Name, o.SpanID, tr)
		}
	}
	return s
}

// checkGroupCommit: the commit wait links to one log.group_commit (in
// this trace, or in that of the batch's first traced request) that
// carries the batch's size and sync time.
func checkGroupCommit(t *testing.T, j *jaegertest.Jaeger, tr jaegertest.Trace, wait jaegertest.Span) {
	t.Helper()
	if len(wait.Links) != 1 {
		t.Errorf("engine.commit_wait %s: links %v, want one, to its group commit", wait.SpanID, wait.Links)
		return
	}
	l := wait.Links[0]
	if l.TraceID != tr.ID {
		tr = j.Wait(t, l.TraceID, "log.group_commit")
	}
	commit, ok := tr.Span(l.SpanID)
	if !ok || commit.Name != "log.group_commit" {
		t.Errorf("engine.commit_wait links to %v, which is %q, want a log.group_commit; trace %s", l, commit.Name, tr)
		return
	}
	for _, k := range groupCommitAttrs {
		if _, ok := commit.Attrs[k]; !ok {
			t.Errorf("log.group_commit has no %s: %v", k, commit.Attrs)
		}
	}
	if n, _ := commit.Attrs["surge.batch.inputs"].(int64); n < 1 || commit.Attr("surge.partition") != wait.Attr("surge.partition") {
		t.Errorf("log.group_commit of %v inputs in partition %q, want at least the commit wait's in its partition %q",
			commit.Attrs["surge.batch.inputs"], commit.Attr("surge.partition"), wait.Attr("surge.partition"))
	}
}

// traceParent is a caller's span, sent as a W3C traceparent.
type traceParent struct{ traceID, spanID string }

func newParent(t *testing.T) traceParent {
	t.Helper()
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return traceParent{traceID: hex.EncodeToString(b[:16]), spanID: hex.EncodeToString(b[16:])}
}

func (p traceParent) header() string { return "00-" + p.traceID + "-" + p.spanID + "-01" }

// answer is what send got back.
type answer struct {
	header http.Header
	body   []byte
}

// send makes one JSON request, with a traceparent unless it is "", and
// requires status.
func send(t *testing.T, method, url, body, traceparent string, status int) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
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
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %s %s, want %d", method, url, resp.Status, b, status)
	}
	return answer{header: resp.Header, body: b}
}

func decode(t *testing.T, a answer, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
}

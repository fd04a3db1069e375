package jaegertest_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/tracing/jaegertest"
)

// clusterPartitions is the test cluster's partition count: one for each
// of its two nodes.
const clusterPartitions = 2

// ownedTimeout bounds the wait for the cluster's nodes to share its
// partitions (a Kafka group rebalance).
const ownedTimeout = 90 * time.Second

// Two nodes of a cluster on Kafka, each exporting to Jaeger under its own
// service (one over OTLP/HTTP, one over gRPC): a reservation sent to
// either with a traceparent is in the caller's trace with that node's
// server span, and every span of the trace descends from the caller's,
// whichever node made it.
func TestClusterNodesTracesInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	brokers, cluster := kafkatest.Brokers(t), kafkatest.Topic(t, "jaeger")
	nodes := []jaegertest.Server{
		j.Serve(t, jaegertest.HTTP, "--kafka", brokers, "--cluster", cluster, "--node-id", "a", "--partitions", fmt.Sprint(clusterPartitions)),
		j.Serve(t, jaegertest.GRPC, "--kafka", brokers, "--cluster", cluster, "--node-id", "b", "--partitions", fmt.Sprint(clusterPartitions)),
	}
	waitShared(t, nodes)
	send(t, "POST", nodes[0].URL+"/v1/event", `{"eventName":"jk","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":10,"colCount":10}]}`, "", 200)
	name := "POST /v1/event/{id}/reservation"
	for _, n := range nodes {
		parent := newParent(t)
		h := send(t, "POST", n.URL+"/v1/event/jk/reservation", `{"userId":"u1","eventId":"jk","areaId":"A","numOfSeats":1,"type":"RANDOM"}`, parent.header(), 200)
		tr := j.Wait(t, parent.traceID, name)
		var edge []jaegertest.Span
		for _, s := range tr.Named(name) {
			if s.Service == n.Service {
				edge = append(edge, s)
			}
		}
		if len(edge) != 1 || edge[0].ParentID != parent.spanID {
			t.Fatalf("%s: server spans %v in trace %s, want one, the caller's child", n.Service, edge, tr)
		}
		if got, want := h.header.Get("traceresponse"), "00-"+tr.ID+"-"+edge[0].SpanID+"-01"; got != want {
			t.Errorf("%s: traceresponse %q, want %q", n.Service, got, want)
		}
		for _, s := range tr.Spans {
			if !descends(tr, s, parent.spanID) {
				t.Errorf("%s (%s, of %s) does not descend from the caller's span %s; trace %s", s.Name, s.SpanID, s.Service, parent.spanID, tr)
			}
		}
	}
}

// descends reports whether s's chain of parents in tr reaches ancestor.
func descends(tr jaegertest.Trace, s jaegertest.Span, ancestor string) bool {
	for range tr.Spans {
		if s.ParentID == ancestor {
			return true
		}
		p, ok := tr.Span(s.ParentID)
		if !ok {
			return false
		}
		s = p
	}
	return false
}

// waitShared waits until every node serves a partition and all of them
// are served, so requests do not race the rebalance.
func waitShared(t *testing.T, nodes []jaegertest.Server) {
	t.Helper()
	deadline := time.Now().Add(ownedTimeout)
	for {
		total, each := 0, true
		for _, n := range nodes {
			k := owned(n)
			total += k
			each = each && k > 0
		}
		if each && total == clusterPartitions {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the nodes serve %d of %d partitions (each some: %v)", ownedTimeout, total, clusterPartitions, each)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// owned counts the partitions node serves, from its /metrics.
func owned(node jaegertest.Server) int {
	resp, err := http.Get(node.URL + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "surge_partition_owned{") && strings.HasSuffix(line, "} 1") {
			n++
		}
	}
	return n
}

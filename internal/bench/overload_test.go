package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestOverloadReadsServerMetrics: the partition count, the shed counters
// and the p99 bucket of a phase come from the server's /metrics text.
func TestOverloadReadsServerMetrics(t *testing.T) {
	// 100 queue delays observed before the phase, all under 1 ms; 1,000
	// during it, 985 under 1 ms and 15 under 4 ms: p99 is in the 4 ms bucket.
	phase := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		under1, under4 := 100, 100
		if phase == 1 {
			under1, under4 = 1085, 1100
		}
		for p := range 3 {
			fmt.Fprintf(w, "surge_engine_inbox_depth{partition=\"%d\"} 0\n", p)
		}
		fmt.Fprintf(w, "surge_engine_shed_total{reason=\"queue_delay\"} %d\n", 7+phase*5)
		const q = `surge_engine_queue_delay_seconds`
		fmt.Fprintf(w, "# TYPE %s histogram\n", q)
		fmt.Fprintf(w, "%s_bucket{le=\"0.001\"} %d\n%s_bucket{le=\"0.004\"} %d\n%s_bucket{le=\"+Inf\"} %d\n", q, under1, q, under4, q, under4)
		fmt.Fprintf(w, "%s_sum 1\n%s_count %d\n", q, q, under4)
	}))
	defer srv.Close()
	ctx := context.Background()
	if n, err := metricsPartitions(ctx, srv.URL); err != nil || n != 3 {
		t.Fatalf("partitions %d, %v; want 3", n, err)
	}
	m0, err0 := scrape(ctx, srv.URL)
	phase = 1
	m1, err1 := scrape(ctx, srv.URL)
	if err0 != nil || err1 != nil {
		t.Fatal(err0, err1)
	}
	var r PhaseReport
	serverSide(&r, m0, m1)
	if d := r.Shed["queue_delay"]; d != 5 {
		t.Fatalf("shed during the phase %v, want 5", d)
	}
	if p := r.ServerQueueP99Us; p == nil || *p != 4000 {
		t.Fatalf("p99 bucket %v, want 4000 µs", p)
	}
	if p := r.ServerHandlerP99Us; p != nil {
		t.Fatalf("p99 of a histogram the server does not have: %d, want none", *p)
	}
}

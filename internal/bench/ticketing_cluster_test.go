package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func f64(v float64) *float64 { return &v }

func near(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }

func TestClusterCPUArithmetic(t *testing.T) {
	embedded := &RunReport{Stats: Stats{Reservations: 10_000}}
	embedded.setCPU(0.1) // 10 µs per reservation

	// 20,000 reservations; nodes 0.2 + 0.3 + 0.1 s, broker 0.4 s: 1.0 s in
	// all, 50 µs each, 5× embedded, the broker 40 % of it.
	c := clusterCPU(20_000, []*float64{f64(0.2), f64(0.3), f64(0.1)}, f64(0.4), embedded)
	for name, got := range map[string]struct {
		p    *float64
		want float64
	}{
		"nodes seconds":      {c.NodesCPUSeconds, 0.6},
		"broker seconds":     {c.BrokerCPUSeconds, 0.4},
		"per reservation":    {c.CPUPerReservationUs, 50},
		"nodes per res":      {c.NodesCPUPerReservationUs, 30},
		"broker per res":     {c.BrokerCPUPerReservationUs, 20},
		"broker share":       {c.BrokerSharePercent, 40},
		"embedded per res":   {c.EmbeddedPerReservationUs, 10},
		"multiple of embedd": {c.MultipleOfEmbedded, 5},
	} {
		if !near(got.p, got.want) {
			t.Errorf("%s: got %v, want %v", name, got.p, got.want)
		}
	}

	// The broker not measured: the nodes' figures stay, the totals and the
	// comparison (which would flatter the cluster) are left out.
	c = clusterCPU(20_000, []*float64{f64(0.2), f64(0.3)}, nil, embedded)
	if !near(c.NodesCPUPerReservationUs, 25) || c.CPUPerReservationUs != nil || c.MultipleOfEmbedded != nil || c.BrokerSharePercent != nil {
		t.Errorf("without the broker: %+v", c)
	}
	// A node whose CPU could not be read makes the nodes' total unknown.
	c = clusterCPU(20_000, []*float64{f64(0.2), nil}, f64(0.4), embedded)
	if c.NodesCPUSeconds != nil || c.CPUPerReservationUs != nil || !near(c.BrokerCPUPerReservationUs, 20) {
		t.Errorf("a node unknown: %+v", c)
	}
	// No reservations, no embedded CPU: nothing divided by zero.
	c = clusterCPU(0, []*float64{f64(0.2)}, f64(0.4), &RunReport{})
	if c.CPUPerReservationUs != nil || c.EmbeddedPerReservationUs != nil || !near(c.NodesCPUSeconds, 0.2) {
		t.Errorf("no reservations: %+v", c)
	}
}

func TestPartitionsDivided(t *testing.T) {
	ids := []string{"n1", "n2"}
	st := func(owners map[string]string) clusterStatus {
		var s clusterStatus
		s.Partitions = 4
		s.Owners = map[string]struct {
			NodeID string `json:"nodeId"`
		}{}
		for p, n := range owners {
			s.Owners[p] = struct {
				NodeID string `json:"nodeId"`
			}{n}
		}
		return s
	}
	all := map[string]string{"0": "n1", "1": "n1", "2": "n2", "3": "n2"}
	for _, c := range []struct {
		name   string
		st     clusterStatus
		owned  [][]int
		reason string // "" when ready
	}{
		{"ready", st(all), [][]int{{0, 1}, {2, 3}}, ""},
		{"no owner in the map yet", st(map[string]string{"0": "n1", "1": "n1", "2": "n2"}), [][]int{{0, 1}, {2, 3}}, "partition 3 has no owner"},
		{"a stale map", st(map[string]string{"0": "n1", "1": "n1", "2": "n2", "3": "n1"}), [][]int{{0, 1}, {2, 3}}, "partition 3: its map says n1, n2 serves it"},
		{"a node not serving yet", st(all), [][]int{{0, 1, 2, 3}, nil}, "n2 serves no partition"},
		{"moving: served twice", st(all), [][]int{{0, 1, 2}, {2, 3}}, "partition 2 served by 2 nodes"},
		{"moving: served by none", st(all), [][]int{{0, 1}, {3}}, "partition 2 served by 0 nodes"},
		{"no status", clusterStatus{}, nil, "no partition count"},
	} {
		got := partitionsDivided(c.st, c.owned, ids)
		if (c.reason == "") != (got == "") || !strings.Contains(got, c.reason) {
			t.Errorf("%s: %q, want %q", c.name, got, c.reason)
		}
	}
}

func TestFindKafkaScript(t *testing.T) {
	repo := t.TempDir()
	script := filepath.Join(repo, "scripts", "kafka.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	// bin/surge of a checkout, wherever the bench runs from.
	if got, err := findKafkaScript(filepath.Join(repo, "bin", "surge"), elsewhere); err != nil || got != script {
		t.Errorf("from the binary: %q, %v", got, err)
	}
	// An installed binary run from inside a checkout.
	if got, err := findKafkaScript(filepath.Join(elsewhere, "surge"), filepath.Join(repo, "internal")); err != nil || got != script {
		t.Errorf("from the working directory: %q, %v", got, err)
	}
	_, err := findKafkaScript(filepath.Join(elsewhere, "surge"), elsewhere)
	if err == nil || !strings.Contains(err.Error(), "SURGE_KAFKA_BROKERS") || !strings.Contains(err.Error(), "--kafka-script") {
		t.Errorf("neither: %v", err)
	}
}

// The cluster's goals and its lines in the report, with the broker
// measured and not.
func TestClusterReportJudgesAndPrints(t *testing.T) {
	server := &RunReport{Server: "surge", Stats: Stats{Reservations: 10_000, P99Us: 20_000}}
	server.setCPU(0.1)
	cr := &ClusterReport{
		RunReport: RunReport{Server: "surge cluster (2 nodes)", Stats: Stats{Reservations: 10_000, P99Us: 120_000, PerSecond: 5000, DoubleBookings: []DoubleBooking{}}},
		Cluster:   "bench-native-x", Brokers: "127.0.0.1:9092", BrokerPID: 42, BrokerPeakRSSBytes: new(int64(300 << 20)),
		Nodes: []ClusterNodeReport{
			{ID: "n1", Addr: "127.0.0.1:1", CPUSeconds: f64(0.1), Reservations: 5000, Owned: []int{0, 1}},
			{ID: "n2", Addr: "127.0.0.1:2", CPUSeconds: f64(0.1), Reservations: 5000, Owned: []int{2, 3}},
		},
	}
	cr.setCPU(0.25)
	cr.Counters = &clusterCounters{Transactions: 500, Appends: 1000, ProduceSeconds: 5, Forwarded: 6000, ForwardRetries: 2}
	cr.ClusterCPU = clusterCPU(10_000, []*float64{f64(0.1), f64(0.1)}, f64(0.05), server)
	f := &FlowReport{Flow: FlowNative, Server: server, Cluster: cr}
	f.judge(256)
	met := map[string]*bool{}
	for _, g := range f.Goals {
		met[g.Name] = g.Met
	}
	if m := met["cluster CPU per reservation vs embedded"]; m == nil || !*m {
		t.Errorf("cluster CPU goal (2.5×): %v, want met", m)
	}
	if m := met["cluster p99"]; m == nil || *m {
		t.Errorf("cluster p99 goal (120 ms): %v, want not met", m)
	}
	var out strings.Builder
	writeFlow(&out, ReportConfig{Areas: 1, Reservations: 10_000, Clients: 2, Groups: 1, Inflight: 256, HTTP2: true}, f)
	for _, s := range []string{"surge cluster (2 nodes)", "node n1", "node n2", "broker java (pid 42)", "300 MiB",
		"CPU per reservation: 25.0 µs (nodes 20.0 µs + broker 5.0 µs, the broker's share 20 %); embedded 10.0 µs (cluster 2.50×)",
		"120.00 ms", "surge cluster (2 nodes): double booking: none",
		"500 transactions over the spike (20.0 of its reservations per transaction), 2.0 engine batches each, 5.00 ms from append to commit on average; forwarded to the owner: 6,000 calls (60 % of reservations), 2 retries"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"cluster":{`, `"cpuPerReservationUs":25`, `"brokerSharePercent":20`, `"cpuMultipleOfEmbedded":2.5`, `"brokerCpuSeconds":0.05`, `"reservationsSent":5000`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}

	// Broker given from outside: said so, no total, the goal not judged.
	cr.BrokerPID, cr.BrokerPeakRSSBytes = 0, nil
	cr.BrokerNote = "broker CPU not measured: given from outside"
	cr.ClusterCPU = clusterCPU(10_000, []*float64{f64(0.1), f64(0.1)}, nil, server)
	f.judge(256)
	out.Reset()
	writeFlow(&out, ReportConfig{Areas: 1, Reservations: 10_000, Clients: 2, Groups: 1, Inflight: 256, HTTP2: true}, f)
	if !strings.Contains(out.String(), "CPU per reservation: nodes 20.0 µs; broker CPU not measured") || !strings.Contains(out.String(), "not measured") {
		t.Errorf("report without broker CPU:\n%s", out.String())
	}
	for _, g := range f.Goals {
		if g.Name == "cluster CPU per reservation vs embedded" && (g.Met != nil || g.Note != cr.BrokerNote) {
			t.Errorf("CPU goal judged without the broker: %+v", g)
		}
	}
}

func TestMetricValue(t *testing.T) {
	for _, c := range []struct {
		line, name, label string
		want              float64
		ok                bool
	}{
		{"surge_kafka_txn_appends_count 42", "surge_kafka_txn_appends_count", "", 42, true},
		{"surge_kafka_txn_appends_count_more 42", "surge_kafka_txn_appends_count", "", 0, false},
		{`surge_cluster_forwarded_total{result="sent"} 7.5e+03`, "surge_cluster_forwarded_total", `result="sent"`, 7500, true},
		{`surge_cluster_forwarded_total{result="retry"} 3`, "surge_cluster_forwarded_total", `result="sent"`, 0, false},
		{`surge_cluster_forwarded_total 3`, "surge_cluster_forwarded_total", `result="sent"`, 0, false},
		{"# HELP surge_kafka_txn_appends_count x", "surge_kafka_txn_appends_count", "", 0, false},
	} {
		got, ok := metricValue(t, c.line, c.name, c.label)
		if got != c.want || ok != c.ok {
			t.Errorf("%q: %v %v, want %v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// metricValue reads name's value from one line of /metrics text, for the
// series whose labels include label (name="value"; "" for any).
func metricValue(t *testing.T, line, name, label string) (float64, bool) {
	t.Helper()
	m, err := parseMetrics(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	var want []string
	if k, v, ok := strings.Cut(label, "="); ok {
		want = []string{k, strings.Trim(v, `"`)}
	}
	return m.value(name, want...)
}

// TestClusterCountersFromHistograms: the Kafka counters come from the
// nodes' histograms (their _count and _sum) and the forwarded counter by
// result, as the server exposes them.
func TestClusterCountersFromHistograms(t *testing.T) {
	text := "# TYPE surge_kafka_txn_appends histogram\n" +
		"surge_kafka_txn_appends_bucket{le=\"1\"} 2\nsurge_kafka_txn_appends_bucket{le=\"+Inf\"} 4\n" +
		"surge_kafka_txn_appends_sum 12\nsurge_kafka_txn_appends_count 4\n" +
		"# TYPE surge_kafka_produce_seconds histogram\n" +
		"surge_kafka_produce_seconds_bucket{le=\"+Inf\"} 12\nsurge_kafka_produce_seconds_sum 0.5\nsurge_kafka_produce_seconds_count 12\n" +
		"# TYPE surge_cluster_forwarded_total counter\n" +
		"surge_cluster_forwarded_total{result=\"sent\"} 30\nsurge_cluster_forwarded_total{result=\"retry\"} 2\n"
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	got := countersOf(m)
	want := clusterCounters{Transactions: 4, Appends: 12, ProduceSeconds: 0.5, Forwarded: 30, ForwardRetries: 2}
	if got != want {
		t.Fatalf("counters %+v, want %+v", got, want)
	}
}

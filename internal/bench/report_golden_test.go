package bench

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The report writers' whole text, fixed reports through every branch,
// compared byte for byte with testdata/report: a change to a writer that
// changes what a user reads shows here. -update-golden rewrites the files
// (only for a change meant to alter the output).
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/report from the writers")

func checkGolden(t *testing.T, name string, write func(io.Writer)) {
	t.Helper()
	var b bytes.Buffer
	write(&b)
	path := filepath.Join("testdata", "report", name+".txt")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-golden to create it)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, path, b.Bytes(), want)
	}
}

func doubleBookings(n int) []DoubleBooking {
	d := make([]DoubleBooking, n)
	for i := range d {
		d[i] = DoubleBooking{Group: i % 2, Area: i % 3, Seat: Seat{Row: i, Col: i + 1}, Times: 2 + i%2}
	}
	return d
}

func TestFlowReportGolden(t *testing.T) {
	server := &RunReport{Server: "surge", Stats: Stats{Reservations: 1_234_567, Successes: 400_000, Failures: 834_000, Errors: 500, Invalid: 67,
		Retries: 12, Seconds: 12.3456, PerSecond: 100_003.4, P50Us: 800, P95Us: 12_345, P99Us: 30_000, MaxUs: 2_500_000,
		SeatsSold: 400_000, SeatsOffered: 400_000, GeneratorCPUSeconds: 3.21, DoubleBookings: doubleBookings(12),
		ErrorSamples: []string{"POST: connection reset"}, InvalidSamples: []string{"seats not adjacent"}}}
	server.setCPU(25)
	server.PeakRSSBytes = new(int64(300 << 20))
	base := &RunReport{Server: "null", Stats: Stats{Reservations: 1_234_567, Successes: 1_234_567, PerSecond: 120_000, P50Us: 400,
		P95Us: 900, P99Us: 15_000, MaxUs: 40_000, GeneratorCPUSeconds: 2}}
	base.setCPU(10)
	f := &FlowReport{Flow: FlowCompat, Server: server, Baseline: base,
		Restart:  &RestartReport{KillReadySeconds: 1.5, StopSeconds: 0.1, StopError: "exit status 2", ReadySeconds: 0.4, Reservations: 1_234_567, RSSAfterKillBytes: 80 << 20, RSSAfterRestartBytes: 90 << 20},
		Problems: []string{"DOUBLE BOOKING of 12 seats", "500 errors"}}
	f.judge(128)
	checkGolden(t, "flow-compat-http1", func(w io.Writer) {
		writeFlow(w, ReportConfig{Areas: 4, Reservations: 1_234_567, Clients: 8, Groups: 2, Inflight: 128, Seed: 7}, f)
	})

	// No baseline, no CPU, a failed restart.
	plain := &RunReport{Server: "http://127.0.0.1:9/", Stats: Stats{Reservations: 10, PerSecond: 5, Seconds: 2, P99Us: 999, DoubleBookings: doubleBookings(1)}}
	g := &FlowReport{Flow: FlowNative, Server: plain, Restart: &RestartReport{Error: "no health check in 30 s"}}
	g.judge(256)
	checkGolden(t, "flow-native-restart-failed", func(w io.Writer) {
		writeFlow(w, ReportConfig{Areas: 1, Reservations: 10, Clients: 1, Groups: 1, Inflight: 256, HTTP2: true}, g)
	})

	// A cluster beside the embedded server, the broker measured, then not.
	emb := &RunReport{Server: "surge", Stats: Stats{Reservations: 10_000, P99Us: 20_000, SeatsSold: 10_000, SeatsOffered: 10_000, DoubleBookings: []DoubleBooking{}}}
	emb.setCPU(0.1)
	cr := &ClusterReport{
		RunReport: RunReport{Server: "surge cluster (2 nodes)", Stats: Stats{Reservations: 10_000, P99Us: 120_000, PerSecond: 5000,
			SeatsSold: 9000, SeatsOffered: 10_000, DoubleBookings: doubleBookings(2), ErrorSamples: []string{"forward: timeout"}}},
		Cluster: "bench-native-x", Brokers: "127.0.0.1:9092", ReadySeconds: 2.25, BrokerPID: 42, BrokerPeakRSSBytes: new(int64(300 << 20)),
		Nodes: []ClusterNodeReport{
			{ID: "n1", Addr: "127.0.0.1:1", CPUSeconds: f64(0.1), PeakRSSBytes: new(int64(50 << 20)), Reservations: 5000, Owned: []int{0, 1}},
			{ID: "n2", Addr: "127.0.0.1:2", Reservations: 5000, Owned: []int{2, 3}},
		},
	}
	cr.setCPU(0.25)
	cr.Counters = &clusterCounters{Transactions: 500, Appends: 1000, ProduceSeconds: 5, Forwarded: 6000, ForwardRetries: 2}
	cr.ClusterCPU = clusterCPU(10_000, []*float64{f64(0.1), f64(0.1)}, f64(0.05), emb)
	c := &FlowReport{Flow: FlowNative, Server: emb, Cluster: cr}
	c.judge(256)
	cfg := ReportConfig{Areas: 1, Reservations: 10_000, Clients: 2, Groups: 1, Inflight: 256, HTTP2: true, Cluster: 2}
	checkGolden(t, "flow-cluster", func(w io.Writer) { writeFlow(w, cfg, c) })
	cr.BrokerPID, cr.BrokerPeakRSSBytes, cr.Counters = 0, nil, nil
	cr.BrokerNote = "broker CPU not measured: given from outside"
	cr.ClusterCPU = clusterCPU(10_000, []*float64{f64(0.1), f64(0.1)}, nil, emb)
	c.judge(256)
	checkGolden(t, "flow-cluster-no-broker", func(w io.Writer) { writeFlow(w, cfg, c) })
}

func TestJobsReportGolden(t *testing.T) {
	lat := func(p99 int64) LatencyReport {
		return LatencyReport{Count: 100, P50Us: p99 / 4, P95Us: p99 / 2, P99Us: p99, MaxUs: p99 * 2}
	}
	srv := &JobsRunReport{Server: "surge", Phase: JobsPhaseSubmit, Seconds: 10, Submitted: 70_000, SubmitRate: 7000,
		SubmitErrors: map[string]int64{"RESOURCE_EXHAUSTED": 12, "UNAVAILABLE": 3}, ResourceExhausted: 12, SubmitCall: lat(60_000),
		WorkerErrorsByCode: map[string]int64{"NOT_FOUND": 2, "ABORTED": 1}, ReportRetries: 5, Executed: 69_000, ExecutedRate: 6900,
		ErrorSamples: []string{"submit: unavailable"}, GeneratorCPU: 1.5, PeakRSSBytes: new(int64(64 << 20))}
	srv.setCPU(JobsPhaseSubmit, 7)
	null := &JobsRunReport{Server: "null", Phase: JobsPhaseSubmit, Seconds: 10, Submitted: 100_000, SubmitRate: 10_000, SubmitCall: lat(20_000)}
	null.setCPU(JobsPhaseSubmit, 4)
	sub := &JobsPhase{Phase: JobsPhaseSubmit, Server: srv, Baseline: null}
	sub.judge()
	e2eSrv := &JobsRunReport{Server: "surge", Phase: JobsPhaseE2E, Seconds: 10, TargetRate: 10_000, Submitted: 100_000, NotSent: 4, Executed: 99_990,
		ExecutedRate: 10_500, DrainSeconds: 0.5, Unfinished: 10, SubmitCall: lat(4000), SubmitToStart: lat(8_000), SubmitToDone: lat(9_000), SendLagP99Us: 1234}
	e2e := &JobsPhase{Phase: JobsPhaseE2E, Server: e2eSrv}
	e2e.judge()
	rep := &JobsReport{Config: JobsConfig{DurationSeconds: 10, Concurrency: 200, Connections: 1, SubmitWork: true, Rate: 10_000, Batch: 1,
		MaxInflight: 1000, Workers: 4, WorkerConcurrency: 64}, Peer: jobsPeer, Phases: []*JobsPhase{sub, e2e}}
	checkGolden(t, "jobs", func(w io.Writer) {
		writeJobsPhase(w, rep, sub)
		writeJobsPhase(w, rep, e2e)
	})
	rep.Config.SubmitWork, rep.Config.Ack, rep.Config.Batch, rep.Config.Connections = false, true, 16, 4
	checkGolden(t, "jobs-ack-batch", func(w io.Writer) {
		writeJobsPhase(w, rep, sub)
		writeJobsPhase(w, rep, e2e)
	})
	// A run the host stalled, beside the do-nothing server (no log, no fsyncs).
	e2eSrv.HostStalls = &StallReport{Count: 35, MaxUs: 117_560, TotalUs: 1_511_000}
	e2eSrv.ServerFsyncs = &FsyncReport{Count: 4980, Slow: 31, Stalled: 3, Seconds: 10.61}
	e2e.Baseline = &JobsRunReport{Server: "null", Phase: JobsPhaseE2E, Seconds: 10, TargetRate: 10_000, Submitted: 100_000, Executed: 100_000,
		ExecutedRate: 10_000, SubmitCall: lat(400), SubmitToStart: lat(800), SubmitToDone: lat(900), HostStalls: &StallReport{}}
	checkGolden(t, "jobs-host", func(w io.Writer) { writeJobsPhase(w, rep, e2e) })
}

func TestCrowdReportGolden(t *testing.T) {
	null := &CrowdRun{Server: "null", CrowdStats: CrowdStats{Reservations: 1000, Reserved: 1000, CompletionSeconds: 1.25, LastSeatSoldSeconds: 1.2,
		Requests: 2000, Posts: 1000, Gets: 1000, Connections: 8, P50Us: 500, P99Us: 4000, MaxUs: 9000, GeneratorCPUSeconds: 0.7}}
	null.setCPU(0.5)
	srv := &CrowdRun{Server: "surge", CrowdStats: CrowdStats{Reservations: 1000, Reserved: 400, Failed: 590, Errors: 10, ErrorPercent: 1,
		ErrorsByKind: map[string]int64{"timeout": 7, "reset": 3}, CompletionSeconds: 31.5, LastSeatSoldSeconds: 2.5,
		Requests: 2600, Posts: 1300, Gets: 1300, Retries: 600, Connections: 40,
		RefusalsByStatus: map[string]int64{"503": 100, "429": 500}, Refusals: 600, RefusalPercent: 23.1,
		RetryAfter: map[string]int64{"": 100, "1": 500}, AttemptErrors: map[string]int64{"EOF": 4},
		SeatsSold: 400, SeatsOffered: 400, DoubleBookings: doubleBookings(2), P50Us: 1500, P99Us: 2_500_000, MaxUs: 30_000_000, GeneratorCPUSeconds: 1.1},
		ServerCounters: map[string]float64{`surge_engine_shed_total{reason="queue_delay"}`: 5, "surge_http_requests_refused_total": 595},
		PeakRSSBytes:   new(int64(128 << 20))}
	srv.setCPU(2)
	srv.estimateRefusalShare(null)
	rep := &CrowdReport{Benchmark: "ticketing-crowd",
		Config:   CrowdShape{Groups: 2, ReservationsPerGrp: 500, Areas: 2, ClientsPerGroup: 50, Transport: CrowdTransportHTTP1, RetryMax: 20, RetryWaitMinSeconds: 1, RetryWaitMaxSeconds: 30, PostTimeoutSeconds: 30, GetTimeoutSeconds: 10},
		Baseline: null, Server: srv, Machine: MachineInfo{CPUs: 2, CPUModel: "Test CPU @ 2 GHz", LoadAvg: "0.10 0.20 0.30"}}
	checkGolden(t, "crowd-http1", func(w io.Writer) { writeCrowd(w, rep) })

	rep.Config.Transport, rep.Baseline = CrowdTransportXNet, nil
	srv.Crash = &CrowdCrash{Trigger: "after 500 decisions", Killed: true, KilledAtSeconds: 1.5, DecisionsAtKill: 512, IDsAtKill: 2048,
		RestartSeconds: 0.8, ReplayedRecords: 25620, RecoverySeconds: -1, IDsChecked: 100000, ReadReserved: 6392, ReadFailed: 93606,
		LostIDs: 2, Unreadable: 1, ChangedAnswers: 3, WrongSeats: 4, DoubleBookings: doubleBookings(1), Samples: []string{"x: 404"}}
	checkGolden(t, "crowd-killed", func(w io.Writer) { writeCrowd(w, rep) })
	srv.Crash = &CrowdCrash{Trigger: "after 9 s", Killed: true, KilledAtSeconds: 9, RestartError: "no health check in 30 s"}
	checkGolden(t, "crowd-restart-failed", func(w io.Writer) { writeCrowd(w, rep) })
	srv.Crash = &CrowdCrash{Trigger: "after 9 s"}
	checkGolden(t, "crowd-not-killed", func(w io.Writer) { writeCrowd(w, rep) })
	rep.Server = nil
	checkGolden(t, "crowd-no-runs", func(w io.Writer) { writeCrowd(w, rep) })
}

func TestCommerceReportGolden(t *testing.T) {
	lat := func(p99 int64) LatencyReport {
		return LatencyReport{Count: 100, P50Us: p99 / 4, P95Us: p99 / 2, P99Us: p99, MaxUs: p99 * 2}
	}
	http := func(p99 int64) map[string]LatencyReport {
		m := map[string]LatencyReport{}
		for i, t := range commerceReqTypes {
			m[t] = lat(p99 * int64(i+1))
		}
		return m
	}
	srv := &CommerceRunReport{Server: "surge", TargetRate: 1000, Seconds: 60, Iterations: 59_000, NotSent: 12, AchievedRate: 983.3,
		AchievedPercent: 98.3, Orders: 35_000, Reserves: 15_000, Reserve409: 30, Customers: 9_000, Errors: 3,
		ErrorsByKind: map[string]int64{"poll": 1, "order": 2}, ErrorSamples: []string{"POST /orders: 500"},
		HTTP: http(4000), HTTPAll: lat(9000), SagaPoll: SagaReport{LatencyReport: lat(300_000), Timeouts: 1},
		SendLagP99Us: 700, GeneratorCPU: 4.5, PeakRSSBytes: new(int64(200 << 20))}
	srv.setCPU(6)
	null := &CommerceRunReport{Server: "null", TargetRate: 1000, Seconds: 60, Iterations: 60_000, AchievedRate: 1000, AchievedPercent: 100, RateMet: true,
		HTTP: http(1000), HTTPAll: lat(2000), SagaPoll: SagaReport{LatencyReport: lat(1000)}, SagaLongPoll: SagaReport{LatencyReport: lat(900)}}
	null.setCPU(2)
	l := &CommerceLevel{Rate: 1000, Server: srv, Baseline: null}
	l.judge()
	rep := &CommerceReport{Config: CommerceConfig{Levels: []float64{1000}, DurationSeconds: 60, Clients: 64, MaxInflight: 5000, HTTP2: true, Seed: 3},
		Levels: []*CommerceLevel{l}, Peer: commercePeer, StockPerProduct: 1_000_000}
	checkGolden(t, "commerce", func(w io.Writer) { writeCommerceLevel(w, rep, l) })

	// HTTP/1.1, no baseline, the CPU per iteration without the seconds.
	srv.ServerCPU, srv.RateMet = nil, true
	l.Baseline = nil
	l.judge()
	rep.Config.HTTP2 = false
	checkGolden(t, "commerce-http1", func(w io.Writer) { writeCommerceLevel(w, rep, l) })
}

func TestSequencerReportGolden(t *testing.T) {
	stages := []SeqStage{
		{Name: "processed-sequencing", P50Ms: 1.234, P90Ms: 5, P95Ms: 9.999, P99Ms: 12.5, AvgMs: 3, MinMs: 0.01, MaxMs: 120},
		{Name: "created-processing", P50Ms: 0.5, P90Ms: 1, P95Ms: 2, P99Ms: 30, AvgMs: 0.7, MinMs: 0, MaxMs: 44},
		{Name: "custom", P50Ms: 100, P90Ms: 200, P95Ms: 300, P99Ms: 400, AvgMs: 150, MinMs: 50, MaxMs: 999},
	}
	peer := &SeqScenarioReport{Scenario: SeqScenarioPeer, Server: "surge", Groups: 1, MessagesPerGroup: 60_000, PollMs: 200,
		Sent: 60_000, Sequenced: 60_000, Complete: true, Seconds: 1.9, PerSecond: 31_578.9, PostSeconds: 0.25,
		Ordered: new(true), Stages: stages, ServerAverageRate: f64(30_000), Polls: 10, ServerCPU: f64(1.2), CPUPerMsgUs: f64(20),
		GeneratorCPU: 0.3, PeakRSSBytes: new(int64(40 << 20)), PerGroup: []*SeqGroupReport{{}}}
	delays := &SeqScenarioReport{Scenario: SeqScenarioDelays, Server: "null", Groups: 1, MessagesPerGroup: 100, CreationDelayMs: 5, ProcessingTimeMs: 10,
		PollMs: 200, Sent: 100, Sequenced: 60, PostSeconds: 1, Polls: 40, PollErrors: 2, ErrorSamples: []string{"GET count: 503"},
		Duplicates: []string{"g1: 101 of 100"}}
	groups := &SeqScenarioReport{Scenario: SeqScenarioGroups, Server: "http://127.0.0.1:9/", Groups: 8, MessagesPerGroup: 1000, CreationDelayMs: 2,
		PollMs: 500, Sent: 8000, Sequenced: 8000, Complete: true, Seconds: 3, PerSecond: 2666.6, FirstGroupSeconds: 1.5, PostSeconds: 2,
		Ordered: new(false), UnorderedGroups: []string{"g1", "g2", "g3", "g4", "g5", "g6"}, Stages: stages[:1], ServerAverageRate: f64(2500),
		Polls: 99, PerGroup: make([]*SeqGroupReport, 8)}
	zero := &SeqScenarioReport{Scenario: SeqScenarioGroups, Server: "surge", Groups: 4, PollMs: 200, Complete: true, Seconds: 0.5, PerSecond: 8000,
		Sent: 4000, Sequenced: 4000, Ordered: new(true), PerGroup: make([]*SeqGroupReport, 4)}
	rep := &SequencerReport{Config: SequencerConfig{Scenarios: []string{SeqScenarioPeer, SeqScenarioDelays, SeqScenarioGroups}, Messages: 60_000, PollMs: 200},
		Peer: sequencerPeer, Goals: []Goal{goal("rate", "≥ 10,000", "", f64(31_578.9), func(v float64) bool { return v >= 10_000 }, "")}}
	checkGolden(t, "sequencer", func(w io.Writer) {
		writeSequencerHeader(w, rep)
		for _, s := range []*SeqScenarioReport{peer, delays, groups, zero} {
			writeSeqScenario(w, s)
		}
		writeSequencerGoals(w, rep)
	})
}

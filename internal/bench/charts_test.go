package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixedTimeline is a run's timeline with every field set: n points of
// one second, ops and latencies growing with i, CPU cpuPerOpUs per op.
func fixedTimeline(n int, opsPerSec int64, cpuPerOpUs float64) []TimelinePoint {
	pts := make([]TimelinePoint, n)
	for i := range pts {
		ops := opsPerSec + int64(i)*100
		cpu := float64(ops) * cpuPerOpUs / 1e6
		pts[i] = TimelinePoint{
			Seconds: float64(i + 1), Interval: 1, Ops: ops,
			P50Us: 1000 + int64(i)*10, P90Us: 2000, P99Us: 5000 + int64(i)*100, MaxUs: 9000,
			ServerCPUSeconds: &cpu,
		}
	}
	return pts
}

func fixedRun(server string, n int, opsPerSec int64, cpuPerOpUs float64) *RunReport {
	tl := fixedTimeline(n, opsPerSec, cpuPerOpUs)
	run := &RunReport{Server: server, Timeline: tl}
	cpu := 0.0
	for _, p := range tl {
		run.Reservations += p.Ops
		cpu += *p.ServerCPUSeconds
	}
	run.Successes = run.Reservations
	run.setCPU(cpu)
	return run
}

// fixedChartReport is a two-flow ticketing report, server and do-nothing
// server in each, as a run with --baseline writes it.
func fixedChartReport() *Report {
	rep := &Report{Benchmark: "ticketing", Config: ReportConfig{Areas: 10, Reservations: 20000, Clients: 4, Groups: 1, Inflight: 256, HTTP2: true, Flow: FlowBoth, Baseline: true, Seed: 1}}
	for _, flow := range []string{FlowCompat, FlowNative} {
		fr := &FlowReport{Flow: flow, Server: fixedRun("surge", 5, 9000, 40), Baseline: fixedRun("null", 4, 12000, 30), Problems: []string{}}
		fr.judge(rep.Config.Inflight)
		rep.Flows = append(rep.Flows, fr)
	}
	return rep
}

// parseXML fails the test unless b is well-formed XML; it returns the
// character data of every <text> element (the titles, axes and legend).
func parseXML(t *testing.T, name string, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	inText := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return texts
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", name, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(tok)))
			}
		}
	}
}

func TestChartsOfAFixedReportAreSVGWithEverySeries(t *testing.T) {
	charts, err := renderCharts(ticketingChartGroups(fixedChartReport()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"compat-throughput.svg": {"compat: throughput", "surge", "do-nothing server"},
		"compat-latency.svg":    {"compat: latency percentiles", "surge p50", "surge p99", "do-nothing server p50", "do-nothing server p99"},
		"compat-cpu.svg":        {"compat: server CPU per reservation", "surge", "do-nothing server"},
		"native-throughput.svg": {"native: throughput", "surge", "do-nothing server"},
		"native-latency.svg":    {"native: latency percentiles", "surge p50", "surge p99", "do-nothing server p50", "do-nothing server p99"},
		"native-cpu.svg":        {"native: server CPU per reservation", "surge", "do-nothing server"},
		"cpu-per-op.svg":        {"server CPU per reservation, whole run", "surge", "do-nothing server", "compat", "native"},
	}
	if len(charts) != len(want) {
		t.Fatalf("%d charts, want %d", len(charts), len(want))
	}
	for _, c := range charts {
		texts := parseXML(t, c.File, c.SVG)
		for _, w := range want[c.File] {
			if !containsString(texts, w) {
				t.Errorf("%s: no text %q among %q", c.File, w, texts)
			}
		}
		if want[c.File] == nil {
			t.Errorf("unexpected chart %s", c.File)
		}
	}
}

// A line is drawn from the timeline's points: the throughput chart's
// y axis reaches the fastest second of the fixed runs.
func TestThroughputChartPlotsThePoints(t *testing.T) {
	g := chartGroup{Name: "native", File: "native", Runs: []chartRun{{Name: "surge", Points: fixedTimeline(3, 50000, 10)}}}
	c, err := throughputChart(g)
	if err != nil {
		t.Fatal(err)
	}
	texts := parseXML(t, c.File, c.SVG)
	// 50,200 ops/s at most, stretched by legendHeadroom: the top tick
	// is at least 60,000.
	if !containsString(texts, "60000") {
		t.Fatalf("no 60000 tick on the y axis: %q", texts)
	}
}

// --charts writes every SVG and a Markdown report that shows each.
func TestChartsDirHasTheSVGsAndAMarkdownReport(t *testing.T) {
	rep := fixedChartReport()
	dir := filepath.Join(t.TempDir(), "charts")
	run := &ticketingRun{rep: rep}
	if err := writeChartOutputs(Options{ChartsDir: dir}, run); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, chartReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "reservations/s") {
		t.Errorf("the Markdown report lacks the text report:\n%s", md)
	}
	svgs, _ := filepath.Glob(filepath.Join(dir, "*.svg"))
	if len(svgs) != 7 {
		t.Fatalf("%d SVGs in %s, want 7", len(svgs), dir)
	}
	for _, f := range svgs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parseXML(t, f, b)
		if !strings.Contains(string(md), "]("+filepath.Base(f)+")") {
			t.Errorf("report.md does not show %s:\n%s", filepath.Base(f), md)
		}
	}
}

// --html is one page that fetches nothing: no URL at all, every chart
// inline as <svg>.
func TestHTMLReportIsSelfContained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.html")
	if err := writeChartOutputs(Options{HTMLPath: path}, &ticketingRun{rep: fixedChartReport()}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := strings.ToLower(string(b))
	for _, bad := range []string{"http://", "https://", "src=", "href=", "url(", "<link", "<script", "@import", "<img"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q", bad)
		}
	}
	if n := strings.Count(page, "<svg"); n != 7 {
		t.Errorf("%d inline charts, want 7", n)
	}
	for _, s := range strings.Split(page, "<svg")[1:] {
		parseXML(t, "inline svg", []byte("<svg"+s[:strings.Index(s, "</svg>")]+"</svg>"))
	}
	if !strings.Contains(page, "surge bench ticketing") || !strings.Contains(page, "reservations/s") {
		t.Error("the page lacks the text report")
	}
}

// A bench without timelines refuses --charts and --html before it runs.
func TestChartsRefusedByABenchWithoutTimelines(t *testing.T) {
	err := runScenario(context.Background(), Options{HTMLPath: "x.html", Stdout: io.Discard, Stderr: io.Discard}, "surge-test-", &crowdBench{t: &ticketingRun{}, rep: &CrowdReport{}})
	if err == nil || !strings.Contains(err.Error(), "--charts and --html are not available") {
		t.Fatalf("err %v", err)
	}
	if err := checkSampleInterval(time.Millisecond); err == nil || !strings.Contains(err.Error(), "at least 10ms") {
		t.Fatalf("1ms interval: %v", err)
	}
}

// Every operation recorded lands in exactly one point, and the server's
// CPU of each point adds up to what it used.
func TestTimelineCountsEveryOperation(t *testing.T) {
	var mu sync.Mutex
	cpu := 0.0
	tl := newTimeline(minSampleInterval, func() (float64, error) {
		mu.Lock()
		defer mu.Unlock()
		cpu += 0.001
		return cpu, nil
	})
	tl.begin()
	const goroutines, each = 8, 5000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range each {
				tl.record(int64(i % 3000))
				if i%500 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	pts := tl.end()
	var ops int64
	prev := 0.0
	for _, p := range pts {
		ops += p.Ops
		if p.Seconds <= prev || p.ServerCPUSeconds == nil {
			t.Fatalf("point %+v after %v s", p, prev)
		}
		prev = p.Seconds
	}
	if ops != goroutines*each {
		t.Fatalf("%d ops in the timeline, want %d", ops, goroutines*each)
	}
}

// Past the limit, neighbours merge: memory stays bounded, no operation
// or CPU second is lost, and a merged percentile is the pair's worst.
func TestTimelineStaysBounded(t *testing.T) {
	const limit = 8
	var pts []TimelinePoint
	src := fixedTimeline(100, 1000, 20)
	for _, p := range src {
		pts = appendBounded(pts, p, limit)
		if len(pts) > limit {
			t.Fatalf("%d points, limit %d", len(pts), limit)
		}
	}
	var ops, wantOps int64
	var cpu, wantCPU float64
	for _, p := range src {
		wantOps += p.Ops
		wantCPU += *p.ServerCPUSeconds
	}
	for _, p := range pts {
		ops += p.Ops
		cpu += *p.ServerCPUSeconds
	}
	if ops != wantOps || cpu-wantCPU > 1e-9 || wantCPU-cpu > 1e-9 {
		t.Fatalf("ops %d cpu %v, want %d %v", ops, cpu, wantOps, wantCPU)
	}
	span := 0.0
	for _, p := range pts {
		span += p.Interval
	}
	// src's p99 grows every second: a merged point's p99 is its last's.
	k := int(pts[0].Interval)
	if span != 100 || pts[len(pts)-1].Seconds != 100 || k < 2 || pts[0].P99Us != src[k-1].P99Us {
		t.Fatalf("span %v, points %+v", span, pts)
	}
}

// The commerce bench charts each level: its timeline counts every
// iteration sent, and --charts and --html hold the level's charts.
func TestCommerceLevelCharts(t *testing.T) {
	base := serve(t, NullHandler())
	dir := t.TempDir()
	o := CommerceOptions{Rate: 200, Duration: time.Second, Clients: 2, MaxInflight: 1000, HTTP2: true, Seed: 3,
		Options: Options{Target: base, ChartsDir: filepath.Join(dir, "c"), HTMLPath: filepath.Join(dir, "r.html"), SampleInterval: 100 * time.Millisecond}}
	rep, out, err := runCommerceTest(t, o)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := rep.Levels[0].Server
	var ops int64
	for _, p := range r.Timeline {
		ops += p.Ops
	}
	if ops != r.Iterations || len(r.Timeline) < 2 {
		t.Fatalf("timeline of %d points counts %d iterations, want %d", len(r.Timeline), ops, r.Iterations)
	}
	for f, series := range map[string]string{"level-200-throughput.svg": base, "level-200-latency.svg": base + " p99"} {
		b, err := os.ReadFile(filepath.Join(o.ChartsDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if texts := parseXML(t, f, b); !containsString(texts, series) {
			t.Errorf("%s: no series %s in %q", f, series, texts)
		}
	}
	page, err := os.ReadFile(o.HTMLPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "<h2>200 it/s: throughput</h2>") || !strings.Contains(string(page), "achieved rate") {
		t.Errorf("the page lacks the level's chart or report")
	}
}

// The jobs bench's timeline counts a submit phase's submits and an e2e
// phase's executed jobs, and each phase gets its charts.
func TestJobsPhaseTimelines(t *testing.T) {
	rep := &JobsReport{}
	for _, phase := range []string{JobsPhaseSubmit, JobsPhaseE2E} {
		base := startNullInProcess(t)
		o := testJobsOptions()
		o.SampleInterval = 50 * time.Millisecond
		run, err := newJobsRun(o, phase).measure(context.Background(), phase, connectDialer(base), func() (float64, error) { return 0, nil })
		if err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		var ops int64
		for _, p := range run.Timeline {
			ops += p.Ops
		}
		want := run.Submitted
		if phase == JobsPhaseE2E {
			want = run.Executed
		}
		if ops != want || want == 0 {
			t.Errorf("%s: timeline counts %d, want %d", phase, ops, want)
		}
		run.Server = "surge"
		rep.Phases = append(rep.Phases, &JobsPhase{Phase: phase, Server: run})
	}
	charts, err := renderCharts(jobsChartGroups(rep))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, c := range charts {
		parseXML(t, c.File, c.SVG)
		files[c.File] = true
	}
	for _, f := range []string{"jobs-submit-throughput.svg", "jobs-e2e-latency.svg", "jobs-e2e-cpu.svg"} {
		if !files[f] {
			t.Errorf("no %s among %v", f, files)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A real spike with --charts, --html and a short --sample-interval: the
// JSON's timeline holds every answered reservation, the dir holds the
// SVGs (well-formed XML) and the Markdown report showing them, and the
// HTML page has them inline.
func TestBenchTicketingWritesChartsAndHTML(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := buildSurge(t)
	dir := t.TempDir()
	chartsDir, htmlPath := filepath.Join(dir, "charts"), filepath.Join(dir, "t.html")
	rep, b, _ := runTicketingBench(t, context.Background(), "--flow", "native", "--baseline=false", "-n", "2000", "--serve-exe", bin,
		"--sample-interval", "20ms", "--charts", chartsDir, "--html", htmlPath)
	if len(rep.Flows) != 1 || rep.Flows[0].Server == nil {
		t.Fatalf("report %s", b)
	}
	// The do-nothing server is off: its process would be the test binary.
	run := rep.Flows[0].Server
	var ops int64
	for _, p := range run.Timeline {
		ops += p.Ops
	}
	if answered := run.Reservations - run.Errors; ops != answered || len(run.Timeline) == 0 {
		t.Errorf("timeline of %d points counts %d ops, want %d", len(run.Timeline), ops, answered)
	}
	md, err := os.ReadFile(filepath.Join(chartsDir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"native-throughput.svg", "native-latency.svg", "native-cpu.svg", "cpu-per-op.svg"} {
		svg, err := os.ReadFile(filepath.Join(chartsDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := wellFormed(svg); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !strings.Contains(string(md), "("+f+")") {
			t.Errorf("report.md does not show %s", f)
		}
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "<svg"); n != 4 || strings.Contains(string(page), "http") {
		t.Errorf("HTML page: %d inline charts (want 4), or names an address", n)
	}
}

// --charts is refused with --crowd, whose spike keeps no timeline.
func TestBenchTicketingCrowdRefusesCharts(t *testing.T) {
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"ticketing", "--crowd", "--target", "http://127.0.0.1:1", "--charts", t.TempDir()})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--charts and --html are not available") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
}

func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := d.Token(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

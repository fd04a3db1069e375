package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/bench"
)

// TestBenchTicketingCores: --cores end to end, a short spike against the
// real server pinned to one CPU and then to two (where the machine has
// them): the JSON has a run per count on the CPUs asked for, and the
// report the table and the goal.
func TestBenchTicketingCores(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	if runtime.GOOS != "linux" {
		t.Skip("pins processes to CPUs: Linux only")
	}
	counts, want := "1", 1
	if runtime.NumCPU() >= 2 {
		counts, want = "1,2", 2
	}
	bin := buildSurge(t)
	jsonPath := filepath.Join(t.TempDir(), "c.json")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"ticketing", "--flow", "native", "--baseline=false", "-n", "1500", "--serve-exe", bin, "--json", jsonPath,
		"--cores", counts})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || len(rep.Flows) != 1 || rep.Flows[0].Cores == nil || len(rep.Flows[0].Cores.Runs) != want {
		t.Fatalf("report %s\n%s", b, out.String())
	}
	for i, r := range rep.Flows[0].Cores.Runs {
		if r.Cores != i+1 || r.Reservations != 1500 || r.Errors != 0 || r.ServerCPUSeconds == nil || r.GeneratorBusyPercent == nil {
			t.Errorf("run %d: %+v", i, r)
		}
	}
	if r := rep.Flows[0].Cores.Runs[0]; strings.ContainsAny(r.ServerCPUs, ",-") || want == 2 && (r.GeneratorCPUs == "shared" || r.GeneratorCPUs == r.ServerCPUs) {
		t.Errorf("one core: server on %s, bench on %s", r.ServerCPUs, r.GeneratorCPUs)
	}
	if !strings.Contains(out.String(), "on pinned cores:") {
		t.Errorf("no table in the text report:\n%s", out.String())
	}
	if want == 2 && !strings.Contains(out.String(), "reservations per server CPU-s, 2 cores vs 1") {
		t.Errorf("no goal in the text report:\n%s", out.String())
	}
}

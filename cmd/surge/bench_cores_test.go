package main

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, b, out := runTicketingBench(t, ctx, "--flow", "native", "--baseline=false", "-n", "1500", "--serve-exe", bin, "--cores", counts)
	if !rep.OK || len(rep.Flows) != 1 || rep.Flows[0].Cores == nil || len(rep.Flows[0].Cores.Runs) != want {
		t.Fatalf("report %s\n%s", b, out)
	}
	for i, r := range rep.Flows[0].Cores.Runs {
		if r.Cores != i+1 || r.Reservations != 1500 || r.Errors != 0 || r.ServerCPUSeconds == nil || r.GeneratorBusyPercent == nil {
			t.Errorf("run %d: %+v", i, r)
		}
	}
	if r := rep.Flows[0].Cores.Runs[0]; strings.ContainsAny(r.ServerCPUs, ",-") || want == 2 && (r.GeneratorCPUs == "shared" || r.GeneratorCPUs == r.ServerCPUs) {
		t.Errorf("one core: server on %s, bench on %s", r.ServerCPUs, r.GeneratorCPUs)
	}
	if !strings.Contains(out, "on pinned cores:") {
		t.Errorf("no table in the text report:\n%s", out)
	}
	if want == 2 && !strings.Contains(out, "reservations per server CPU-s, 2 cores vs 1") {
		t.Errorf("no goal in the text report:\n%s", out)
	}
}

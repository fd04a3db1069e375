package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/bench"
)

// TestBenchTicketingTraceCost: --trace-cost end to end, one short round
// against the real server: the JSON has the three settings, in the
// report and the goals; the traced servers' spans reach the bench's
// receiver and the untraced one sends none.
func TestBenchTicketingTraceCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := buildSurge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, b, out := runTicketingBench(t, ctx, "--flow", "compat", "--baseline=false", "-n", "1500", "--serve-exe", bin,
		"--trace-cost", "--trace-cost-rounds", "1")
	if !rep.OK || len(rep.Flows) != 1 || rep.Flows[0].TraceCost == nil {
		t.Fatalf("report %s\n%s", b, out)
	}
	tc := rep.Flows[0].TraceCost
	if tc.Rounds != 1 || tc.SampleRatio != bench.DefaultTraceCostRatio || len(tc.Settings) != 3 || len(tc.Runs) != 3 {
		t.Fatalf("trace cost %s", b)
	}
	for i, want := range []string{"off", "1 %", "100 %"} {
		s := tc.Settings[i]
		if s.Name != want || (s.SampleRatio == nil) != (want == "off") || len(s.CPUPerReservationUs) != 1 || s.BadExports != 0 {
			t.Errorf("setting %d: %+v, want %s", i, s, want)
		}
		if on := want != "off"; on && s.SpansReceived == 0 || !on && s.SpansReceived != 0 {
			t.Errorf("tracing %s: %d spans received", want, s.SpansReceived)
		}
	}
	for _, r := range tc.Runs {
		if r.Reservations != 1500 || r.Errors != 0 {
			t.Errorf("run %+v: want 1,500 reservations, no error", r)
		}
	}
	var goals []string
	for _, g := range rep.Flows[0].Goals {
		goals = append(goals, g.Name)
	}
	if g := strings.Join(goals, "; "); !strings.Contains(g, "tracing at 1 %, CPU per reservation vs off") || !strings.Contains(g, "tracing at 100 %") {
		t.Errorf("goals %s, want tracing's two", g)
	}
	if !strings.Contains(out, "tracing's cost: 1 round(s)") {
		t.Errorf("no trace cost in the text report:\n%s", out)
	}
}

// --trace-cost-ratio and --trace-cost-rounds without --trace-cost are
// refused before anything starts.
func TestBenchTraceCostFlagsNeedTraceCost(t *testing.T) {
	for _, flag := range []string{"--trace-cost-ratio=0.1", "--trace-cost-rounds=2"} {
		cmd := newBenchCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"ticketing", flag})
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "for --trace-cost only") {
			t.Errorf("%s alone: %v, want refused", flag, err)
		}
	}
}

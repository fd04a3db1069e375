package bench

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestReportJudgesAndPrints(t *testing.T) {
	server := &RunReport{Server: "surge", Stats: Stats{Reservations: 1000, Successes: 400, Failures: 600,
		Seconds: 0.5, PerSecond: 2000, P99Us: 30_000, SeatsSold: 1000, SeatsOffered: 1000, DoubleBookings: []DoubleBooking{}}}
	server.setCPU(0.025) // 40,000 reservations per CPU-second
	base := &RunReport{Server: "null", Stats: Stats{Reservations: 1000, Successes: 1000, PerSecond: 2400, P99Us: 15_000}}
	base.setCPU(0.02)
	f := &FlowReport{Flow: FlowNative, Server: server, Baseline: base,
		Restart: &RestartReport{KillReadySeconds: 3.5, StopSeconds: 0.1, ReadySeconds: 0.4, Reservations: 1000}}
	f.judge(256)

	met := map[string]bool{}
	for _, g := range f.Goals {
		if g.Met == nil {
			t.Fatalf("goal %q not judged", g.Name)
		}
		met[g.Name] = *g.Met
	}
	want := map[string]bool{
		"reservations per server CPU-second":        true,  // 40,000 ≥ 40,000
		"rate vs do-nothing server":                 true,  // 83 %
		"p99 vs do-nothing server":                  false, // 2×
		"server CPU per reservation vs do-nothing":  false, // 25 µs against 20 µs
		"restart ready (worst of kill -9, SIGTERM)": false, // 3.5 s after kill -9
	}
	for k, v := range want {
		if met[k] != v {
			t.Errorf("%s: met=%v, want %v", k, met[k], v)
		}
	}

	var out strings.Builder
	writeFlow(&out, ReportConfig{Areas: 1, Reservations: 1000, Clients: 1, Groups: 1, Inflight: 256, HTTP2: true}, f)
	for _, s := range []string{"reservations/s", "2,000", "2,400", "30.00 ms", "40,000", "double booking: none",
		"after kill -9 ready in 3.50 s", "restart ready in 0.40 s", "83.3 %", "2.00×"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	if _, err := json.Marshal(&Report{Flows: []*FlowReport{f}}); err != nil {
		t.Fatal(err)
	}
}

// With rounds, the CPU goal judges the median of the rounds' own ratios
// and the report prints each round.
func TestCPUGoalTakesTheMedianRound(t *testing.T) {
	run := func(cpu float64) *RunReport {
		r := &RunReport{Stats: Stats{Reservations: 1000}}
		r.setCPU(cpu)
		return r
	}
	f := &FlowReport{Flow: FlowCompat, Server: run(0.04), Baseline: run(0.05)}
	f.CPURounds = []CPURound{newCPURound(1, f.Server, f.Baseline, false), newCPURound(2, run(0.06), run(0.05), true),
		newCPURound(3, run(0.045), run(0.05), false)}
	f.judge(256)
	var g *Goal
	for i := range f.Goals {
		if f.Goals[i].Name == "server CPU per reservation vs do-nothing" {
			g = &f.Goals[i]
		}
	}
	// Ratios 0.8, 1.2, 0.9: the median 0.9 meets ≤ 1.0×; the ratio of
	// the sums (0.145 / 0.15) would too, the mean of the ratios not.
	if g == nil || g.Value == nil || *g.Value < 0.8999 || *g.Value > 0.9001 || g.Met == nil || !*g.Met || g.Note != "median of 3 rounds' own ratios" {
		t.Fatalf("goal %+v", g)
	}
	var out strings.Builder
	writeFlow(&out, ReportConfig{Areas: 1, Reservations: 1000, Clients: 1, Groups: 1, Inflight: 256}, f)
	for _, s := range []string{"round 2: surge 60.0 µs, do-nothing 50.0 µs: 1.200×", "round 3: surge 45.0 µs"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	for _, bad := range []TicketingOptions{{Rounds: -1}, {Rounds: 2, Crowd: true, Baseline: true}, {Rounds: 2},
		{Rounds: 2, Baseline: true, Options: Options{Target: "http://x"}}} {
		if bad.checkRounds() == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	if err := (TicketingOptions{Rounds: 3, Baseline: true}).checkRounds(); err != nil {
		t.Error(err)
	}
}

// noTrackerNumbers: a report a user reads names no issue of the project's
// tracker ("goals (issue 7)"), which means nothing outside it.
func noTrackerNumbers(t *testing.T, out string) {
	t.Helper()
	if m := regexp.MustCompile(`(?i)\bissue \d+`).FindString(out); m != "" {
		t.Errorf("report names %q:\n%s", m, out)
	}
}

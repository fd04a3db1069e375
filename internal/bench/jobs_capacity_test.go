package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// findCapacity steps up until a step falls behind and reports what the
// server executed there; a server that never falls behind gives a lower
// bound; a failed step is the probe's error.
func TestFindCapacity(t *testing.T) {
	const limit = 14_600.0
	server := func(rate float64) (CapacityStep, error) {
		return CapacityStep{Offered: rate, Executed: min(rate, limit), KeptUp: rate <= limit}, nil
	}
	c, err := findCapacity(10_000, server)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Reached || c.Capacity != limit || len(c.Steps) != 4 {
		t.Fatalf("capacity %v (reached %v) in %d steps, want %v reached in 4: %+v", c.Capacity, c.Reached, len(c.Steps), limit, c.Steps)
	}
	for i, s := range c.Steps {
		if want := 10_000 * math.Pow(capacityFactor, float64(i)); math.Abs(s.Offered-want) > 1e-6 {
			t.Errorf("step %d offered %v, want %v", i, s.Offered, want)
		}
	}

	c, err = findCapacity(1_000, server)
	if err != nil || c.Reached || len(c.Steps) != capacityMaxSteps || c.Capacity >= limit {
		t.Fatalf("a server the steps never outran: %+v, %v; want %d steps, not reached, a lower bound", c, err, capacityMaxSteps)
	}

	boom := errors.New("server did not start")
	if _, err := findCapacity(10_000, func(float64) (CapacityStep, error) { return CapacityStep{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed step: %v", err)
	}
}

// A step is kept up with only if every job was sent, accepted and
// executed, at capacityKept of the rate or better.
func TestKeptUp(t *testing.T) {
	good := func() *JobsRunReport {
		return &JobsRunReport{Submitted: 100, Executed: 100, ExecutedRate: 990}
	}
	if !keptUp(good(), 1000) {
		t.Fatal("a clean step at 99 % of the rate is not kept up with")
	}
	for name, bad := range map[string]func(*JobsRunReport){
		"slow":        func(r *JobsRunReport) { r.ExecutedRate = 900 },
		"not sent":    func(r *JobsRunReport) { r.NotSent = 1 },
		"refused":     func(r *JobsRunReport) { r.ResourceExhausted = 1 },
		"left over":   func(r *JobsRunReport) { r.Unfinished = 1 },
		"a bad reply": func(r *JobsRunReport) { r.SubmitErrors = map[string]int64{"internal": 1} },
	} {
		r := good()
		bad(r)
		if keptUp(r, 1000) {
			t.Errorf("%s: kept up with", name)
		}
	}
}

// The report says what the probe offered and found, and the phase's
// header the rate it then offered.
func TestCapacityReported(t *testing.T) {
	p := &JobsPhase{Phase: JobsPhaseE2E, Capacity: &CapacityReport{
		Steps: []CapacityStep{{10_000, 10_000, true}, {11_500, 11_020, false}}, Capacity: 11_020, Reached: true, Fraction: 0.8, Rate: 8_816}}
	var out bytes.Buffer
	writeJobsPhase(&out, &JobsReport{Config: JobsConfig{Rate: 10_000, Workers: 1, WorkerConcurrency: 64, MaxInflight: 200, Connections: 1, DurationSeconds: 10}}, p)
	for _, want := range []string{"10,000 → 10,000;", "11,500 → 11,020 (fell behind);", "the highest sustained 11,020 jobs/s", "80 % of it: 8,816 jobs/s", "jobs end to end: 8,816 jobs/s offered"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// The probe, wired: RunJobs against a running server steps the rate up,
// then offers the fraction of what it found, and the JSON report says so.
func TestCapacityProbeSetsTheRate(t *testing.T) {
	step, drain := capacityStepTime, capacityStepDrain
	capacityStepTime, capacityStepDrain = 200*time.Millisecond, time.Second
	defer func() { capacityStepTime, capacityStepDrain = step, drain }()
	base := startNullInProcess(t)
	var out, errOut bytes.Buffer
	o := testJobsOptions()
	o.Phase, o.Baseline, o.Target, o.RateOfCapacity, o.Rate = JobsPhaseE2E, false, base, 0.5, 200
	o.Stdout, o.Stderr, o.JSONPath = &out, &errOut, filepath.Join(t.TempDir(), "jobs.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := RunJobs(ctx, o); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errOut.String())
	}
	b, err := os.ReadFile(o.JSONPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep JobsReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Phases[0].Capacity
	if c == nil || len(c.Steps) == 0 || c.Steps[0].Offered != 200 || c.Capacity <= 0 {
		t.Fatalf("no capacity probe from 200 jobs/s in the report: %+v\n%s", c, out.String())
	}
	if c.Fraction != 0.5 || math.Abs(c.Rate-c.Capacity/2) > 1e-6 || rep.Phases[0].Server.TargetRate != c.Rate {
		t.Fatalf("capacity %v: the phase offered %v, want half of it (%v)", c.Capacity, rep.Phases[0].Server.TargetRate, c.Rate)
	}
	if !strings.Contains(out.String(), "capacity probe") {
		t.Errorf("the text report does not show the probe:\n%s", out.String())
	}
}

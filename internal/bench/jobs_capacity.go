package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// The jobs end-to-end goal is judged "at 80 % of the highest sustainable
// rate": a fixed --rate is that only on the host it was picked on, and
// this shared host's speed drifts by a fifth within a night. With
// --rate-of-capacity the bench finds the rate first, on fresh servers
// just before the run.
const (
	capacityFactor   = 1.15 // between steps' rates
	capacityKept     = 0.97 // executed ÷ offered of a step kept up with
	capacityMaxSteps = 12   // from --rate up to 4.7 times it
)

// Each step's load and its drain; variables for the tests' short steps.
var capacityStepTime, capacityStepDrain = 4 * time.Second, 2 * time.Second

// CapacityStep is one rate the probe offered.
type CapacityStep struct {
	Offered  float64 `json:"offeredPerSecond"`
	Executed float64 `json:"executedPerSecond"`
	KeptUp   bool    `json:"keptUp"`
}

// CapacityReport is what the probe found and the rate the phase then
// offered: Fraction of Capacity, the highest rate jobs were executed at.
type CapacityReport struct {
	Steps    []CapacityStep `json:"steps"`
	Capacity float64        `json:"capacityPerSecond"`
	// Reached: a step fell behind; if not, Capacity is only a lower bound.
	Reached  bool    `json:"reached"`
	Fraction float64 `json:"fraction"`
	Rate     float64 `json:"ratePerSecond"`
}

// keptUp: the step's jobs were all sent, accepted and executed, at
// capacityKept of the rate offered or better.
func keptUp(r *JobsRunReport, offered float64) bool {
	return r.errors() == 0 && r.ResourceExhausted == 0 && r.NotSent == 0 && r.Unfinished == 0 &&
		r.ExecutedRate >= capacityKept*offered
}

// findCapacity offers rates from start up, capacityFactor apart, until a
// step falls behind (or after capacityMaxSteps), and returns the highest
// rate jobs were executed at: the last step's if it fell behind, since
// that is what the server did when offered more than it could take.
func findCapacity(start float64, step func(rate float64) (CapacityStep, error)) (*CapacityReport, error) {
	c := &CapacityReport{}
	rate := start
	for range capacityMaxSteps {
		s, err := step(rate)
		if err != nil {
			return c, err
		}
		c.Steps = append(c.Steps, s)
		c.Capacity = max(c.Capacity, s.Executed)
		if !s.KeptUp {
			c.Reached = true
			return c, nil
		}
		rate *= capacityFactor
	}
	return c, nil
}

// probeCapacity runs findCapacity, each step on a fresh server (or the
// --target), and returns the report with the rate the phase is to offer.
func probeCapacity(ctx context.Context, o JobsOptions, rig *Rig, label string, dialFor func(*target) jobsDialer, grpcArgs []string) (*CapacityReport, error) {
	n := 0
	c, err := findCapacity(o.Rate, func(rate float64) (CapacityStep, error) {
		n++
		name := fmt.Sprintf("capacity-%d", n)
		srv, err := rig.target(ctx, label+" "+name, "surge-jobs-"+name, "data-"+name, "jobs-"+name, grpcArgs...)
		if err != nil {
			return CapacityStep{}, err
		}
		po := o
		po.Rate, po.Duration, po.Drain = rate, capacityStepTime, capacityStepDrain
		r := newJobsRun(po, fmt.Sprintf("%s %s (%s jobs/s)", label, name, grouped(int64(rate))))
		rep, err := r.measure(ctx, JobsPhaseE2E, dialFor(srv), srv.cpu(ctx))
		if err != nil {
			srv.stop()
			return CapacityStep{}, err
		}
		s := CapacityStep{Offered: rate, Executed: rep.ExecutedRate, KeptUp: keptUp(rep, rate)}
		return s, srv.stop()
	})
	if err != nil {
		return nil, fmt.Errorf("capacity probe: %w", err)
	}
	if c.Capacity <= 0 {
		return nil, errors.New("capacity probe: no job was executed")
	}
	c.Fraction = o.RateOfCapacity
	c.Rate = c.Fraction * c.Capacity
	return c, nil
}

// writeCapacity says what the probe offered and found.
func writeCapacity(out io.Writer, c *CapacityReport) {
	if c == nil {
		return
	}
	fmt.Fprintf(out, "\ncapacity probe (a fresh server per step, %.0f s each):", capacityStepTime.Seconds())
	for _, s := range c.Steps {
		mark := ""
		if !s.KeptUp {
			mark = " (fell behind)"
		}
		fmt.Fprintf(out, " %s → %s%s;", grouped(int64(s.Offered)), grouped(int64(s.Executed)), mark)
	}
	bound := "the highest sustained"
	if !c.Reached {
		bound = "at least (no step fell behind)"
	}
	fmt.Fprintf(out, " %s %s jobs/s; the phase offers %.0f %% of it: %s jobs/s\n", bound, grouped(int64(c.Capacity)), 100*c.Fraction, grouped(int64(c.Rate)))
}

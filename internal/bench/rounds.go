package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// --rounds: the server and the do-nothing server again, each round on a
// fresh process, the order turned each round, so that the comparison the
// goal judges (the median of each round's own ratio) is not one moment
// of a host whose speed drifts by tens of per cent within minutes.

// goalCPUMultiple is issue 24's HTTP goal: Surge's CPU per reservation at
// most the do-nothing server's.
const goalCPUMultiple = 1.0

// CPURound is one round's server CPU per reservation, Surge's and the
// do-nothing server's; round 1 is the flow's main runs.
type CPURound struct {
	Round      int      `json:"round"`
	ServerUs   *float64 `json:"serverCpuPerReservationUs"`
	BaselineUs *float64 `json:"baselineCpuPerReservationUs"`
	// Ratio is ServerUs over BaselineUs; nil without both.
	Ratio *float64 `json:"ratio"`
	// ServerFirst: Surge ran before the do-nothing server this round.
	ServerFirst bool `json:"serverFirst"`
}

// checkRounds refuses --rounds that cannot compare.
func (o TicketingOptions) checkRounds() error {
	switch {
	case o.Rounds < 0:
		return fmt.Errorf("--rounds %d: want at least 1", o.Rounds)
	case o.Rounds <= 1:
		return nil
	case o.Crowd:
		return errors.New("--rounds runs the spike of --flow; it does not combine with --crowd")
	case o.Target != "" || !o.Baseline:
		return errors.New("--rounds compares fresh servers with the do-nothing one round by round; it needs the baseline and no --target")
	}
	return nil
}

// cpuUs is a run's server CPU per reservation in µs, nil if unknown.
func cpuUs(r *RunReport) *float64 {
	if r == nil {
		return nil
	}
	if us := perReservation(r); us > 0 {
		return new(us * 1e6)
	}
	return nil
}

func newCPURound(round int, server, baseline *RunReport, serverFirst bool) CPURound {
	c := CPURound{Round: round, ServerUs: cpuUs(server), BaselineUs: cpuUs(baseline), ServerFirst: serverFirst}
	if c.ServerUs != nil && c.BaselineUs != nil {
		c.Ratio = new(*c.ServerUs / *c.BaselineUs)
	}
	return c
}

// moreRounds runs rounds 2 to --rounds of the flow: a fresh server and a
// fresh do-nothing server each, Surge first in even rounds.
func (r *ticketingRun) moreRounds(ctx context.Context, flow string, fr *FlowReport) error {
	for round := 2; round <= r.o.Rounds; round++ {
		label := fmt.Sprintf("%s, round %d", flow, round)
		var server, baseline *RunReport
		surge := func() (err error) {
			var problems []string
			server, problems, err = r.freshSpike(ctx, flow, label, fmt.Sprintf("%s-r%d", flow, round), nil, nil)
			fr.Problems = append(fr.Problems, problems...)
			return err
		}
		null := func() (err error) {
			baseline, err = r.baseline(ctx, flow)
			return err
		}
		steps := []func() error{null, surge}
		if round%2 == 0 {
			steps = []func() error{surge, null}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
		}
		if baseline.Errors > 0 {
			r.logf("warning: %s: the do-nothing server had %d errors", label, baseline.Errors)
		}
		fr.CPURounds = append(fr.CPURounds, newCPURound(round, server, baseline, round%2 == 0))
	}
	return nil
}

// freshSpike runs the flow's spike against a fresh `surge serve` on
// serverCPUs, the bench on benchCPUs during the spike (nil: wherever each
// may run), and stops the server. Its problems are the spike's and a
// server that did not exit 0 on SIGTERM.
func (r *ticketingRun) freshSpike(ctx context.Context, flow, label, name string, serverCPUs, benchCPUs []int) (*RunReport, []string, error) {
	srv, _, err := r.startServeOn(ctx, label, "surge-"+name, "data-"+name, name, nil, serverCPUs, r.o.ServeArgs...)
	if err != nil {
		return nil, nil, err
	}
	defer srv.kill()
	restore := func() error { return nil }
	if len(benchCPUs) > 0 {
		if restore, err = pinSelf(benchCPUs); err != nil {
			return nil, nil, err
		}
	}
	run, _, err := r.spike(ctx, flow, srv.baseURL(), nil, true, nil, srv.cpuSeconds)
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, nil, err
	}
	run.setPeakRSS(srv, r.logf)
	run.Timeline = nil // the flow's main run is charted; these are tables
	problems := spikeProblems(label, run)
	if err := srv.stop(); err != nil {
		problems = append(problems, fmt.Sprintf("%s: server did not exit 0 on SIGTERM: %v", label, err))
	}
	return run, problems, nil
}

// cpuGoal is the HTTP goal, judged on the median of the rounds' ratios.
func (f *FlowReport) cpuGoal() *Goal {
	if f.Baseline == nil {
		return nil
	}
	if len(f.CPURounds) == 0 {
		f.CPURounds = []CPURound{newCPURound(1, f.Server, f.Baseline, false)}
	}
	var ratios []float64
	for _, c := range f.CPURounds {
		if c.Ratio != nil {
			ratios = append(ratios, *c.Ratio)
		}
	}
	f.CPUMultiple = medianOf(ratios)
	note := ""
	if len(f.CPURounds) > 1 {
		note = fmt.Sprintf("median of %d rounds' own ratios", len(f.CPURounds))
	}
	g := goal("server CPU per reservation vs do-nothing", fmt.Sprintf("≤ %.1f×", goalCPUMultiple), "×", f.CPUMultiple,
		func(v float64) bool { return v <= goalCPUMultiple }, note)
	return &g
}

func writeCPURounds(out io.Writer, rounds []CPURound) {
	if len(rounds) < 2 {
		return
	}
	fmt.Fprintf(out, "\nserver CPU per reservation, round by round (each round a fresh server and do-nothing server; Surge first in even rounds):\n")
	for _, c := range rounds {
		ratio := "n/a"
		if c.Ratio != nil {
			ratio = fmt.Sprintf("%.3f×", *c.Ratio)
		}
		fmt.Fprintf(out, "round %d: surge %s, do-nothing %s: %s\n", c.Round, usCell(c.ServerUs), usCell(c.BaselineUs), ratio)
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// --cores: each flow's spike again on fresh servers pinned to a growing
// number of CPUs, the generator pinned to the CPUs after them, to see
// whether the server's efficiency holds as cores are added (issue 24's
// many-core goal: reservations per server CPU-second on 8 cores at least
// 80 % of the figure on 2). The first count is the reference.

// goalCoresPercent is the least the last count's reservations per server
// CPU-second may be, as a percentage of the first's.
const goalCoresPercent = 80

// CoresReport is one flow's spike on each core count of --cores.
type CoresReport struct {
	Runs []*CoresRun `json:"runs"`
	// LastPercentOfFirst is the last run's reservations per server
	// CPU-second as a percentage of the first's; nil with one run or
	// without CPU figures.
	LastPercentOfFirst *float64 `json:"lastPercentOfFirst,omitempty"`
}

// CoresRun is the spike against a server pinned to Cores CPUs.
type CoresRun struct {
	Cores      int    `json:"cores"`
	ServerCPUs string `json:"serverCpus"`
	// GeneratorCPUs are the CPUs the bench ran on during the spike, or
	// "shared" when the server took them all and the bench was not pinned.
	GeneratorCPUs string `json:"generatorCpus"`
	// GeneratorBusyPercent is the bench's CPU over the spike as a share
	// of its CPUs' time: near 100 % it, not the server, may be the limit.
	GeneratorBusyPercent *float64 `json:"generatorBusyPercent,omitempty"`
	RunReport
}

// checkCores refuses --cores lists this machine cannot run.
func (o TicketingOptions) checkCores() error {
	if len(o.Cores) == 0 {
		return nil
	}
	switch {
	case o.Crowd:
		return errors.New("--cores runs the spike of --flow; it does not combine with --crowd")
	case o.Target != "":
		return errors.New("--cores starts its own servers, pinned; it does not combine with --target")
	}
	avail, err := availableCPUs()
	if err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, n := range o.Cores {
		switch {
		case n < 1:
			return fmt.Errorf("--cores %d: want a number of CPUs, at least 1", n)
		case n > len(avail):
			return fmt.Errorf("--cores %d: this bench may run on %d CPUs (%s)", n, len(avail), cpuList(avail))
		case seen[n]:
			return fmt.Errorf("--cores lists %d twice", n)
		}
		seen[n] = true
	}
	return nil
}

// cores runs the flow's spike on each core count in turn.
func (r *ticketingRun) cores(ctx context.Context, flow string) (*CoresReport, []string, error) {
	avail, err := availableCPUs()
	if err != nil {
		return nil, nil, err
	}
	rep := &CoresReport{}
	var problems []string
	for _, n := range r.o.Cores {
		run, probs, err := r.coresSpike(ctx, flow, avail, n)
		problems = append(problems, probs...)
		if err != nil {
			return rep, problems, err
		}
		rep.Runs = append(rep.Runs, run)
	}
	rep.summarise()
	return rep, problems, nil
}

// coresSpike runs the spike against a fresh server on the first n of
// avail, the bench on the rest (or, if none are left, unpinned), then
// stops the server.
func (r *ticketingRun) coresSpike(ctx context.Context, flow string, avail []int, n int) (*CoresRun, []string, error) {
	server, gen := avail[:n], avail[n:]
	run := &CoresRun{Cores: n, ServerCPUs: cpuList(server), GeneratorCPUs: cpuList(gen)}
	pin := gen
	if len(gen) == 0 {
		gen, run.GeneratorCPUs = avail, "shared"
	}
	label := fmt.Sprintf("%s on %d core(s) (CPUs %s; the bench on %s)", flow, n, run.ServerCPUs, run.GeneratorCPUs)
	spike, problems, err := r.freshSpike(ctx, flow, label, fmt.Sprintf("%s-cores-%d", flow, n), server, pin)
	if err != nil {
		return nil, problems, err
	}
	spike.Server = fmt.Sprintf("surge on %d core(s)", n)
	run.RunReport = *spike
	if spike.Seconds > 0 {
		busy := 100 * spike.GeneratorCPUSeconds / (spike.Seconds * float64(len(gen)))
		run.GeneratorBusyPercent = &busy
	}
	return run, problems, nil
}

func (c *CoresReport) summarise() {
	c.LastPercentOfFirst = nil
	if len(c.Runs) >= 2 {
		c.LastPercentOfFirst = c.percentOfFirst(c.Runs[len(c.Runs)-1])
	}
}

// percentOfFirst is r's reservations per server CPU-second as a
// percentage of the first run's; nil without both figures.
func (c *CoresReport) percentOfFirst(r *CoresRun) *float64 {
	first, v := c.Runs[0].ReservationsPerCPUSecond, r.ReservationsPerCPUSecond
	if first == nil || v == nil || *first <= 0 {
		return nil
	}
	return new(100 * *v / *first)
}

// goal is the many-core goal, or nothing with one core count.
func (c *CoresReport) goal() []Goal {
	if len(c.Runs) < 2 {
		return nil
	}
	first, last := c.Runs[0], c.Runs[len(c.Runs)-1]
	note := fmt.Sprintf("the bench on CPUs %s", last.GeneratorCPUs)
	if last.GeneratorCPUs == "shared" {
		note = "the bench shared the server's CPUs"
	}
	if b := last.GeneratorBusyPercent; b != nil {
		note += fmt.Sprintf(", %.0f %% busy", *b)
		if *b >= 90 {
			note += ": it may be the limit"
		}
	}
	return []Goal{goal(fmt.Sprintf("reservations per server CPU-s, %d cores vs %d", last.Cores, first.Cores),
		fmt.Sprintf("≥ %d %%", goalCoresPercent), "%", c.LastPercentOfFirst,
		func(v float64) bool { return v >= goalCoresPercent }, note)}
}

func writeCores(out io.Writer, c *CoresReport) {
	fmt.Fprintf(out, "\non pinned cores: the spike on a fresh server pinned to each count of CPUs, the bench on the CPUs after them\n")
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "cores\tserver CPUs\tbench CPUs\treservations/s\tp99\tserver CPU per reservation\treservations per server CPU-s\tvs first\tbench busy\tpeak RSS\t")
	for _, r := range c.Runs {
		vs := "-"
		if p := c.percentOfFirst(r); r != c.Runs[0] && p != nil {
			vs = fmt.Sprintf("%.1f %%", *p)
		}
		perCPU, perRes, busy, rss := "n/a", "n/a", "n/a", "n/a"
		if v := r.ReservationsPerCPUSecond; v != nil {
			perCPU = grouped(int64(*v + 0.5))
		}
		if us := perReservation(&r.RunReport); us > 0 {
			perRes = fmt.Sprintf("%.1f µs", us*1e6)
		}
		if b := r.GeneratorBusyPercent; b != nil {
			busy = fmt.Sprintf("%.0f %%", *b)
		}
		if r.PeakRSSBytes != nil {
			rss = mib(*r.PeakRSSBytes)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Cores, r.ServerCPUs, r.GeneratorCPUs,
			grouped(int64(r.PerSecond+0.5)), micros(r.P99Us), perRes, perCPU, vs, busy, rss)
	}
	tw.Flush()
}

// cpuList writes CPUs as Linux lists them: runs as ranges, "0-3,8".
func cpuList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// writeJobsPhase prints one phase: the server and the do-nothing baseline
// side by side, the goals and the peer's figures.
func writeJobsPhase(out io.Writer, rep *JobsReport, p *JobsPhase) {
	writeCapacity(out, p.Capacity)
	c := rep.Config
	if p.Capacity != nil {
		c.Rate = p.Capacity.Rate
	}
	writeJobsPhaseHeader(out, c, p.Phase)
	var runs []*JobsRunReport
	for _, r := range []*JobsRunReport{p.Server, p.Baseline} {
		if r != nil {
			runs = append(runs, r)
		}
	}
	writeJobsTable(out, p.Phase, runs)
	writeJobsErrors(out, runs)
	if p.Phase == JobsPhaseSubmit && p.Server != nil && p.Server.ResourceExhausted > 0 {
		fmt.Fprintf(out, "  RESOURCE_EXHAUSTED: the queue reached its limit of pending jobs (or the server shed load); not counted as errors, not in the rate\n")
	}
	writeGoals(out, "goals", p.Goals)
	if p.Phase == JobsPhaseSubmit {
		writeJobsPeer(out, rep.Peer, runs)
	}
}

// writeJobsPhaseHeader says what the phase offered: closed-loop callers
// (submit) or an open-loop rate (end to end), and the workers.
func writeJobsPhaseHeader(out io.Writer, c JobsConfig, phase string) {
	workers := fmt.Sprintf("%d worker streams of concurrency %d reporting success at once", c.Workers, c.WorkerConcurrency)
	if c.Ack {
		workers += " (AckJob first)"
	}
	if phase == JobsPhaseSubmit {
		w := "no workers"
		if c.SubmitWork {
			w = workers
		}
		fmt.Fprintf(out, "\njobs submit: %d callers in closed loops of SubmitJob (gRPC, h2c, %d connection(s)) for %.0f s; %s\n",
			c.Concurrency, c.Connections, c.DurationSeconds, w)
		return
	}
	call := "SubmitJob"
	if c.Batch > 1 {
		call = fmt.Sprintf("SubmitJobs of %d", c.Batch)
	}
	fmt.Fprintf(out, "\njobs end to end: %s jobs/s offered in open loop (%s, at most %s calls in flight, %d connection(s)) for %.0f s; %s\n",
		grouped(int64(c.Rate)), call, grouped(int64(c.MaxInflight)), c.Connections, c.DurationSeconds, workers)
}

// writeJobsTable prints the runs side by side, a column each.
func writeJobsTable(out io.Writer, phase string, runs []*JobsRunReport) {
	head := ""
	for _, r := range runs {
		head += "\t" + serverLabel(r.Server)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, head)
	row := columns[*JobsRunReport]{w: tw, lead: "  ", sep: "\t", runs: runs}.row
	e2e := phase == JobsPhaseE2E
	writeJobsCountRows(row, e2e)
	fmt.Fprintln(tw, "  latency p50 / p95 / p99 / max\t\t")
	row("  submit call", func(r *JobsRunReport) string { return latencyCell(r.SubmitCall) })
	if e2e {
		row("  submit→start (at a worker)", func(r *JobsRunReport) string { return latencyCell(r.SubmitToStart) })
		row("  submit→done (report returned)", func(r *JobsRunReport) string { return latencyCell(r.SubmitToDone) })
	}
	writeJobsCostRows(row, e2e)
	if slices.ContainsFunc(runs, func(r *JobsRunReport) bool { return r.HostStalls != nil }) {
		writeHostRows(row)
	}
	_ = tw.Flush()
}

// writeJobsCountRows are what the phase submitted and executed.
func writeJobsCountRows(row func(string, func(*JobsRunReport) string), e2e bool) {
	row("jobs submitted", func(r *JobsRunReport) string {
		return fmt.Sprintf("%s in %.2f s: %s/s", grouped(r.Submitted), r.Seconds, grouped(int64(r.SubmitRate+0.5)))
	})
	if e2e {
		row("not sent (senders busy)", func(r *JobsRunReport) string { return grouped(r.NotSent) })
	}
	row("submit errors (RESOURCE_EXHAUSTED)", func(r *JobsRunReport) string {
		var n int64
		for _, v := range r.SubmitErrors {
			n += v
		}
		return fmt.Sprintf("%s (%s)", grouped(n), grouped(r.ResourceExhausted))
	})
	row("jobs executed", func(r *JobsRunReport) string {
		s := fmt.Sprintf("%s: %s/s", grouped(r.Executed), grouped(int64(r.ExecutedRate+0.5)))
		if e2e {
			s += fmt.Sprintf(" (drain %.2f s, %s unfinished)", r.DrainSeconds, grouped(r.Unfinished))
		}
		return s
	})
	row("ReportResult retries (overloaded)", func(r *JobsRunReport) string { return grouped(r.ReportRetries) })
}

// writeJobsCostRows are the server's CPU and memory and the generator's
// CPU; the CPU is per submit, or per executed job end to end.
func writeJobsCostRows(row func(string, func(*JobsRunReport) string), e2e bool) {
	per := "submit"
	if e2e {
		per = "job"
	}
	row("server CPU per "+per, func(r *JobsRunReport) string {
		if r.CPUPerJobUs == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f µs (%.2f s)", *r.CPUPerJobUs, *r.ServerCPU)
	})
	row("jobs per server CPU-s", func(r *JobsRunReport) string {
		if r.JobsPerCPUs == nil {
			return "-"
		}
		return grouped(int64(*r.JobsPerCPUs + 0.5))
	})
	row("server peak RSS", func(r *JobsRunReport) string {
		if r.PeakRSSBytes == nil {
			return "-"
		}
		return mib(*r.PeakRSSBytes)
	})
	row("generator CPU", func(r *JobsRunReport) string {
		s := fmt.Sprintf("%.2f s", r.GeneratorCPU)
		if e2e {
			s += ", send lag p99 " + micros(r.SendLagP99Us)
		}
		return s
	})
}

// writeHostRows say whether the host stalled the run (stalls.go); runs
// read back from reports older than the meters have none.
func writeHostRows(row func(string, func(*JobsRunReport) string)) {
	row(fmt.Sprintf("host stalls (bench's %v tick > %v late)", stallTick, stallThreshold), func(r *JobsRunReport) string {
		s := r.HostStalls
		if s == nil {
			return "-"
		}
		if s.Count == 0 {
			return "0"
		}
		return fmt.Sprintf("%s, max %s, %s in all", grouped(s.Count), micros(s.MaxUs), micros(s.TotalUs))
	})
	row(fmt.Sprintf("server fsyncs > %.1f / > %.1f ms", fsyncSlowSeconds*1e3, fsyncStallSeconds*1e3), func(r *JobsRunReport) string {
		f := r.ServerFsyncs
		if f == nil {
			return "-"
		}
		return fmt.Sprintf("%s / %s of %s (%.2f s in all)", grouped(f.Slow), grouped(f.Stalled), grouped(f.Count), f.Seconds)
	})
}

// writeJobsErrors prints each run's errors by code and its samples.
func writeJobsErrors(out io.Writer, runs []*JobsRunReport) {
	for _, r := range runs {
		for _, k := range slices.Sorted(maps.Keys(r.SubmitErrors)) {
			fmt.Fprintf(out, "  %s: submit %s: %s\n", serverLabel(r.Server), k, grouped(r.SubmitErrors[k]))
		}
		for _, k := range slices.Sorted(maps.Keys(r.WorkerErrorsByCode)) {
			fmt.Fprintf(out, "  %s: worker call %s: %s\n", serverLabel(r.Server), k, grouped(r.WorkerErrorsByCode[k]))
		}
		for _, s := range r.ErrorSamples {
			fmt.Fprintf(out, "  %s: error sample: %s\n", serverLabel(r.Server), s)
		}
	}
}

// writeJobsPeer puts the submit phase in ghz's words beside the peer's
// ghz figures.
func writeJobsPeer(out io.Writer, pr JobsPeer, runs []*JobsRunReport) {
	var said []string
	for _, r := range runs {
		said = append(said, fmt.Sprintf("~%s jobs/s (%s)", grouped(int64(r.SubmitRate+0.5)), serverLabel(r.Server)))
	}
	fmt.Fprintf(out, "  ghz would say: %s\n", strings.Join(said, ", "))
	fmt.Fprintf(out, "  the peer (ghz, 200 callers, 60 s): ~%s jobs/s, p50 %.0f ms, p99 %.0f ms on %d vCPU plus managed PostgreSQL, Redis and Kafka\n",
		grouped(int64(pr.SubmitRate)), pr.SubmitP50Ms, pr.SubmitP99Ms, pr.VCPU)
}

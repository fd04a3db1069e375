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
	c := rep.Config
	workers := fmt.Sprintf("%d worker streams of concurrency %d reporting success at once", c.Workers, c.WorkerConcurrency)
	if c.Ack {
		workers += " (AckJob first)"
	}
	if p.Phase == JobsPhaseSubmit {
		w := "no workers"
		if c.SubmitWork {
			w = workers
		}
		fmt.Fprintf(out, "\njobs submit: %d callers in closed loops of SubmitJob (gRPC, h2c, %d connection(s)) for %.0f s; %s\n",
			c.Concurrency, c.Connections, c.DurationSeconds, w)
	} else {
		call := "SubmitJob"
		if c.Batch > 1 {
			call = fmt.Sprintf("SubmitJobs of %d", c.Batch)
		}
		fmt.Fprintf(out, "\njobs end to end: %s jobs/s offered in open loop (%s, at most %s calls in flight, %d connection(s)) for %.0f s; %s\n",
			grouped(int64(c.Rate)), call, grouped(int64(c.MaxInflight)), c.Connections, c.DurationSeconds, workers)
	}
	var runs []*JobsRunReport
	head := ""
	for _, r := range []*JobsRunReport{p.Server, p.Baseline} {
		if r != nil {
			runs = append(runs, r)
			head += "\t" + serverLabel(r.Server)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, head)
	row := columns[*JobsRunReport]{w: tw, lead: "  ", sep: "\t", runs: runs}.row
	lat := latencyCell
	row("jobs submitted", func(r *JobsRunReport) string {
		return fmt.Sprintf("%s in %.2f s: %s/s", grouped(r.Submitted), r.Seconds, grouped(int64(r.SubmitRate+0.5)))
	})
	if p.Phase == JobsPhaseE2E {
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
		if p.Phase == JobsPhaseE2E {
			s += fmt.Sprintf(" (drain %.2f s, %s unfinished)", r.DrainSeconds, grouped(r.Unfinished))
		}
		return s
	})
	row("ReportResult retries (overloaded)", func(r *JobsRunReport) string { return grouped(r.ReportRetries) })
	fmt.Fprintln(tw, "  latency p50 / p95 / p99 / max\t\t")
	row("  submit call", func(r *JobsRunReport) string { return lat(r.SubmitCall) })
	if p.Phase == JobsPhaseE2E {
		row("  submit→start (at a worker)", func(r *JobsRunReport) string { return lat(r.SubmitToStart) })
		row("  submit→done (report returned)", func(r *JobsRunReport) string { return lat(r.SubmitToDone) })
	}
	per := "submit"
	if p.Phase == JobsPhaseE2E {
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
		if p.Phase == JobsPhaseE2E {
			s += ", send lag p99 " + micros(r.SendLagP99Us)
		}
		return s
	})
	_ = tw.Flush()
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
	if p.Phase == JobsPhaseSubmit && p.Server != nil && p.Server.ResourceExhausted > 0 {
		fmt.Fprintf(out, "  RESOURCE_EXHAUSTED: the queue reached its limit of pending jobs (or the server shed load); not counted as errors, not in the rate\n")
	}
	writeGoals(out, "goals", p.Goals)
	if p.Phase == JobsPhaseSubmit {
		var said []string
		for _, r := range runs {
			said = append(said, fmt.Sprintf("~%s jobs/s (%s)", grouped(int64(r.SubmitRate+0.5)), serverLabel(r.Server)))
		}
		fmt.Fprintf(out, "  ghz would say: %s\n", strings.Join(said, ", "))
		pr := rep.Peer
		fmt.Fprintf(out, "  the peer (ghz, 200 callers, 60 s): ~%s jobs/s, p50 %.0f ms, p99 %.0f ms on %d vCPU plus managed PostgreSQL, Redis and Kafka\n",
			grouped(int64(pr.SubmitRate)), pr.SubmitP50Ms, pr.SubmitP99Ms, pr.VCPU)
	}
}

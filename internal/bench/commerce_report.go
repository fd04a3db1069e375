package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"text/tabwriter"
)

// writeAnyJSON writes a report as indented JSON, for every bench's --json.
func writeAnyJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeCommerceLevel prints one level: the server and the do-nothing
// baseline side by side, the goals and the peer's figures.
func writeCommerceLevel(out io.Writer, rep *CommerceReport, l *CommerceLevel) {
	c := rep.Config
	proto := "h2c"
	if !c.HTTP2 {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(out, "\ncommerce 60/25/15 mix, open loop at %s iterations/s for %.0f s (%s, %d clients, at most %s in flight, seed %d, stock %s per product)\n",
		grouped(int64(l.Rate)), c.DurationSeconds, proto, c.Clients, grouped(int64(c.MaxInflight)), c.Seed, grouped(rep.StockPerProduct))
	runs := []*CommerceRunReport{l.Server}
	head := "\t" + serverLabel(l.Server.Server)
	if l.Baseline != nil {
		runs = append(runs, l.Baseline)
		head += "\tdo-nothing server"
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, head)
	row := columns[*CommerceRunReport]{w: tw, lead: "  ", sep: "\t", runs: runs}.row
	writeCommerceCountRows(row)
	writeCommerceLatencyRows(tw, row)
	writeCommerceCostRows(row)
	_ = tw.Flush()
	for _, r := range runs {
		for _, k := range slices.Sorted(maps.Keys(r.ErrorsByKind)) {
			fmt.Fprintf(out, "  %s: %s errors: %s\n", serverLabel(r.Server), k, grouped(r.ErrorsByKind[k]))
		}
		for _, s := range r.ErrorSamples {
			fmt.Fprintf(out, "  %s: error sample: %s\n", serverLabel(r.Server), s)
		}
	}
	writeGoals(out, "goals", l.Goals)
	p := rep.Peer
	fmt.Fprintf(out, "  the peer: ≈ %.0f iterations/s on %d vCPU (≈ %.0f per vCPU-second), HTTP p95 ≈ %.0f ms, saga E2E p95 at the %.0f s timeout from %.0f iterations/s\n",
		p.MaxRate, p.VCPU, p.ItersPerVCPUSec, p.HTTPP95Ms, p.SagaTimeoutSecond, p.SagaP95TimeoutAt)
}

// writeCommerceCountRows are the rate achieved and what was sent.
func writeCommerceCountRows(row func(string, func(*CommerceRunReport) string)) {
	row("achieved rate", func(r *CommerceRunReport) string {
		ok := "yes"
		if !r.RateMet {
			ok = "NO"
		}
		return fmt.Sprintf("%s/s, %.1f %% (≥ 99 %%: %s)", grouped(int64(r.AchievedRate+0.5)), r.AchievedPercent, ok)
	})
	row("iterations (not sent)", func(r *CommerceRunReport) string {
		return fmt.Sprintf("%s (%s)", grouped(r.Iterations), grouped(r.NotSent))
	})
	row("orders / reserves (409) / customers", func(r *CommerceRunReport) string {
		return fmt.Sprintf("%s / %s (%s) / %s", grouped(r.Orders), grouped(r.Reserves), grouped(r.Reserve409), grouped(r.Customers))
	})
	row("errors", func(r *CommerceRunReport) string { return grouped(r.Errors) })
}

// writeCommerceLatencyRows are the HTTP latency per request type and the
// sagas' end-to-end time, each under its own heading line in tw.
func writeCommerceLatencyRows(tw io.Writer, row func(string, func(*CommerceRunReport) string)) {
	fmt.Fprintln(tw, "  HTTP latency p50 / p95 / p99 / max\t\t")
	for _, t := range commerceReqTypes {
		row("  "+t, func(r *CommerceRunReport) string { return latencyCell(r.HTTP[t]) })
	}
	row("  all requests", func(r *CommerceRunReport) string { return latencyCell(r.HTTPAll) })
	saga := func(s SagaReport) string {
		if s.Count == 0 {
			return "-"
		}
		return fmt.Sprintf("%s / %s / %s (%s sagas, %s timed out)", micros(s.P50Us), micros(s.P95Us), micros(s.P99Us), grouped(s.Count), grouped(s.Timeouts))
	}
	fmt.Fprintln(tw, "  saga E2E p50 / p95 / p99\t\t")
	row("  polling every 200 ms", func(r *CommerceRunReport) string { return saga(r.SagaPoll) })
	row("  long poll (?wait=)", func(r *CommerceRunReport) string { return saga(r.SagaLongPoll) })
}

// writeCommerceCostRows are the server's CPU and memory and the
// generator's CPU and lateness.
func writeCommerceCostRows(row func(string, func(*CommerceRunReport) string)) {
	row("server CPU per iteration", func(r *CommerceRunReport) string {
		if r.CPUPerIterUs == nil {
			return "-"
		}
		if r.ServerCPU == nil {
			return fmt.Sprintf("%.1f µs", *r.CPUPerIterUs)
		}
		return fmt.Sprintf("%.1f µs (%.2f s)", *r.CPUPerIterUs, *r.ServerCPU)
	})
	row("iterations per server CPU-s", func(r *CommerceRunReport) string {
		if r.ItersPerCPUSecond == nil {
			return "-"
		}
		return grouped(int64(*r.ItersPerCPUSecond + 0.5))
	})
	row("server peak RSS", func(r *CommerceRunReport) string {
		if r.PeakRSSBytes == nil {
			return "-"
		}
		return mib(*r.PeakRSSBytes)
	})
	row("generator CPU, send lag p99", func(r *CommerceRunReport) string {
		return fmt.Sprintf("%.2f s, %s", r.GeneratorCPU, micros(r.SendLagP99Us))
	})
}

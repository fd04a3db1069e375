package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeTraceCost prints tracing's cost: each setting over the rounds and
// against off, then every round in the order it ran.
func writeTraceCost(out io.Writer, t *TraceCostReport) {
	fmt.Fprintf(out, "\ntracing's cost: %d round(s), each setting once a round on a fresh server, the order turned each round; traced servers export over OTLP (%s) to the bench's receiver on 127.0.0.1\n",
		t.Rounds, t.Protocol)
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "server CPU per reservation\tmean\tmedian\tsd\tmin – max\tvs off: ratio of means\tmedian of rounds' ratios\tspans received\texports\t")
	for _, ts := range t.Settings {
		fmt.Fprintf(tw, "tracing %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", ts.Name, usCell(ts.MeanUs), usCell(ts.MedianUs),
			usCell(ts.SDUs), rangeCell(ts.Spread), offCell(ts, ts.RatioOfMeans), offCell(ts, ts.MedianRoundRatio),
			grouped(ts.SpansReceived), grouped(ts.ExportRequests))
	}
	tw.Flush()
	for round := 1; round <= t.Rounds; round++ {
		var cells []string
		for _, run := range t.Runs {
			if run.Round == round {
				cells = append(cells, fmt.Sprintf("%s %s (%s spans)", run.Setting, usCell(run.CPUPerReservationUs), grouped(run.SpansReceived)))
			}
		}
		if len(cells) > 0 {
			fmt.Fprintf(out, "round %d: %s\n", round, strings.Join(cells, ", "))
		}
	}
}

// usCell is a CPU per reservation in µs, or n/a.
func usCell(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f µs", *v)
}

// rangeCell is "min – max", or n/a.
func rangeCell(s Spread) string {
	if s.MinUs == nil || s.MaxUs == nil {
		return "n/a"
	}
	return usCell(s.MinUs) + " – " + usCell(s.MaxUs)
}

// offCell is a ratio to off, with the change in %; "-" for off itself.
func offCell(ts *TraceCostSetting, v *float64) string {
	if ts.SampleRatio == nil {
		return "-"
	}
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f× (%+.1f %%)", *v, 100*(*v-1))
}

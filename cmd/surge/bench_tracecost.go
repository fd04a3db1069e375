package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/bench"
)

// ticketingTraceCostFlags: tracing's cost, measured in one run.
func ticketingTraceCostFlags(cmd *cobra.Command, o *bench.TicketingOptions) {
	f := cmd.Flags()
	f.BoolVar(&o.TraceCost, "trace-cost", false, "also run each flow's spike against fresh servers with tracing off, on at --trace-cost-ratio and on at 1, in --trace-cost-rounds rounds, the order turned each round, exporting to an OTLP receiver the bench starts; report the server's CPU per reservation of each against off (see above)")
	f.Float64Var(&o.TraceCostRatio, "trace-cost-ratio", bench.DefaultTraceCostRatio, "with --trace-cost: the sample ratio measured beside off and 1 (0.01: 1 %)")
	f.IntVar(&o.TraceCostRounds, "trace-cost-rounds", bench.DefaultTraceCostRounds, "with --trace-cost: rounds, each running every setting once (an even number gives every setting the same mean position)")
}

// checkTraceCostFlags refuses --trace-cost's settings without it.
func checkTraceCostFlags(cmd *cobra.Command, o *bench.TicketingOptions) error {
	f := cmd.Flags()
	if !o.TraceCost && (f.Changed("trace-cost-ratio") || f.Changed("trace-cost-rounds")) {
		return errors.New("--trace-cost-ratio and --trace-cost-rounds are for --trace-cost only")
	}
	return nil
}

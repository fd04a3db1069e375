package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/bench"
)

// newBenchCmd is `surge bench`: load generators that reproduce each peer's
// published test against Surge.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run load generators that reproduce peers' published tests",
	}
	cmd.AddCommand(benchTicketingCmd(), benchNullServerCmd())
	return cmd
}

func benchTicketingCmd() *cobra.Command {
	o := bench.TicketingOptions{}
	cmd := &cobra.Command{
		Use:   "ticketing",
		Short: "Reproduce the ticketing peer's spike test (compat and native flows)",
		Long: `Reproduces the flash-sale spike test of the Kafka Streams ticketing peer
(shared/compat/ticketing.md): each group creates an event of --areas areas of
20 x 20 seats and launches --reservations reservations of 1..4 seats at once,
bounded by --inflight, over --clients HTTP clients. It checks every reserved
seat for double booking and reports completion time, rate, outcomes and
latency percentiles.

Unless --baseline=false it first runs the same spike against a server that
does nothing, to show the machine's HTTP ceiling. Unless --target is given it
starts ` + "`surge serve`" + ` itself on a fresh data dir per flow, measures its CPU
time over the spike, then kills it with SIGKILL and times its recovery, and
finally stops it with SIGTERM (it must exit 0) and times a restart after that.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			o.Exe = exe
			o.Stdout, o.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			o.ProgressTTY = benchIsTerminal(os.Stderr)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.RunTicketing(ctx, o)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.Areas, "areas", "a", 10, "areas per event, each 20 x 20 seats")
	f.IntVarP(&o.Reservations, "reservations", "n", 20000, "reservations per group")
	f.IntVarP(&o.Clients, "clients", "c", 4, "HTTP clients per group, each with its own connections")
	f.IntVarP(&o.Groups, "groups", "g", 1, "generator groups, each with its own event, run concurrently (the peer ran 5 processes)")
	f.IntVar(&o.Inflight, "inflight", 256, "reservations in flight at once, across all groups")
	f.BoolVar(&o.HTTP2, "http2", true, "cleartext HTTP/2 with prior knowledge (h2c); false for HTTP/1.1")
	f.StringVar(&o.Flow, "flow", bench.FlowBoth, "compat (POST then GET), native (one round trip) or both")
	f.BoolVar(&o.Baseline, "baseline", true, "also run the spike against a server that does nothing")
	f.StringVar(&o.Target, "target", "", "base URL of a running server to use instead of starting one (CPU from its /metrics; no restart)")
	f.IntVar(&o.Partitions, "partitions", 0, "--partitions for the started server (0: its default)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the started servers' data dirs (default: a temp dir, removed after)")
	f.StringVar(&o.JSONPath, "json", "", "also write the report as JSON to this file")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the random area and seat-count choices")
	return cmd
}

func benchNullServerCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:          "nullserver",
		Short:        "Serve the ticketing routes with handlers that do nothing (the bench's baseline)",
		Hidden:       true,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := bench.ServeNull(ctx, addr); err != nil {
				return fmt.Errorf("nullserver: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	return cmd
}

// benchIsTerminal says whether progress can redraw one line in place.
func benchIsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

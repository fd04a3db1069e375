package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/server"
)

// envOr lets every flag be set from the environment, NATS-style: the flag
// wins, then SURGE_*, then the default.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envIntOr(name string, def int) int {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		fmt.Fprintf(os.Stderr, "surge: ignoring %s=%q: not an integer\n", name, v)
	}
	return def
}

func envDurationOr(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		fmt.Fprintf(os.Stderr, "surge: ignoring %s=%q: not a duration such as 500us\n", name, v)
	}
	return def
}

func newServeCmd() *cobra.Command {
	var cfg server.Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Surge server (embedded log in --data-dir)",
		Long: `Runs the Surge server: one listener for HTTP/1.1 and cleartext HTTP/2,
the ticketing APIs, /healthz and /metrics. Every flag can also be set by the
environment variable named in its help. SIGTERM or SIGINT shuts down
gracefully: in-flight requests finish, the log is synced, a snapshot of every
partition is written, and the process exits 0.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return server.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", envOr("SURGE_ADDR", "127.0.0.1:8080"), "listen address HOST:PORT (SURGE_ADDR)")
	f.StringVar(&cfg.DataDir, "data-dir", envOr("SURGE_DATA_DIR", "surge-data"), "directory for the log and snapshots (SURGE_DATA_DIR)")
	f.IntVar(&cfg.Partitions, "partitions", envIntOr("SURGE_PARTITIONS", 0), "number of partitions; 0 means the data directory's count, or 8 for a new one (SURGE_PARTITIONS)")
	f.IntVar(&cfg.SnapshotEvery, "snapshot-every", envIntOr("SURGE_SNAPSHOT_EVERY", 0), "commands a partition applies between snapshots; 0 means 100000 (SURGE_SNAPSHOT_EVERY)")
	f.DurationVar(&cfg.SyncInterval, "sync-interval", envDurationOr("SURGE_SYNC_INTERVAL", time.Millisecond), "least time between two group commits (fsyncs); appends arriving sooner share the next one (SURGE_SYNC_INTERVAL)")
	f.DurationVar(&cfg.MaxQueueDelay, "max-queue-delay", envDurationOr("SURGE_MAX_QUEUE_DELAY", 0), "longest a reservation may wait in its partition's queue: past half of it new ones get 429 at once, past it a queued one is refused unapplied; 0 means 250ms, negative turns it off (SURGE_MAX_QUEUE_DELAY)")
	f.BoolVar(&cfg.Pprof, "pprof", envOr("SURGE_PPROF", "") == "1", "serve /debug/pprof/ for profiling (SURGE_PPROF=1)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long graceful shutdown waits for in-flight requests")
	return cmd
}

// Command surge is the one Surge binary: serve, bench, worker.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "surge",
		Short:         "Surge: one engine for high-contention transactional workloads",
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newBenchCmd(), newWorkerCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "surge:", err)
		os.Exit(1)
	}
}

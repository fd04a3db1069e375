// Command surge is the one Surge binary: serve, bench, worker, ctl.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "surge",
		Short:         "Surge: one engine for high-contention transactional workloads",
		SilenceErrors: true,
		SilenceUsage:  true, // main points to --help instead
		Args:          noSubcommand,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// Flag mistakes anywhere are usage errors (exit 2), told apart from
	// failures of the work itself (exit 1).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newServeCmd(), newBenchCmd(), newWorkerCmd(), newCtlCmd(), newTokenCmd())
	return root
}

func main() {
	cmd, err := newRootCmd().ExecuteC()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", errorPrefix(cmd), err)
		status := exitStatus(err)
		if status == 2 {
			fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		os.Exit(status)
	}
}

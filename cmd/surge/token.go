package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/auth"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API tokens for `surge serve --tokens`",
		Args:  noSubcommand,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTokenNewCmd())
	return cmd
}

func newTokenNewCmd() *cobra.Command {
	var name, scopes string
	cmd := &cobra.Command{
		Use:   "new --name NAME --scope SCOPE[,SCOPE...]",
		Short: "Print a new random token and its line for the tokens file",
		Long: `Prints two lines on stdout: a new random token (give it to the client, which
sends it as Authorization: Bearer <token>; it is not stored anywhere), then
the line to add to the --tokens file, which holds only the token's SHA-256.

A scope is <workload>:<role>: workload ticketing, commerce, jobs, sequencer or
* (all), role read, write or admin (admin implies write implies read), or
jobs:worker for a job worker's calls only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usageError{fmt.Errorf("--name is required: it names the token in logs and errors")}
			}
			sc, err := auth.ParseScopes(scopes)
			if err != nil {
				return usageError{fmt.Errorf("--scope: %w", err)}
			}
			tok, err := auth.NewToken()
			if err != nil {
				return err
			}
			line := auth.Entry{Name: name, Scopes: sc, Hash: auth.Hash(tok)}.Line()
			// The line must read back: this checks the name too.
			if _, err := auth.ParseFile(strings.NewReader(line)); err != nil {
				return usageError{fmt.Errorf("--name: %w", err)}
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintln(cmd.OutOrStdout(), line)
			fmt.Fprintln(os.Stderr, "first line: the token, shown only now; second: add it to the --tokens file")
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the token's name, shown in logs and errors (letters, digits, '-', '_', '.')")
	cmd.Flags().StringVar(&scopes, "scope", "", "the token's scopes, e.g. ticketing:read,jobs:worker")
	return cmd
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a status for main to exit with, without printing
// anything (the remote command's status for exec and run).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// run executes the CLI with args and returns the process exit status.
func run(ctx context.Context, args []string) int {
	root := newRootCmd(os.Stdout, os.Stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(os.Stderr, "moat: %v\n", err)
		return 1
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "moat",
		Short:         "Moat runs untrusted code in disposable sandboxes (E2B-compatible)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	var verbose bool
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	root.PersistentPreRun = func(*cobra.Command, []string) {
		level := slog.LevelInfo
		if verbose {
			level = slog.LevelDebug
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	}
	root.AddCommand(serverCommands()...)
	root.AddCommand(newTemplateCmd(), newSandboxCmd(), newRunCmd(), newMCPCmd())
	return root
}

// envOr returns the first non-empty environment variable of names, else def.
func envOr(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}

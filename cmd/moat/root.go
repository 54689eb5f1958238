package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// Defaults of the flags that have environment variables.
const (
	defaultAddr    = "127.0.0.1:3000"
	defaultDataDir = "/var/lib/moat"
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
	root.AddCommand(newServeCmd(), newAPIKeyCmd(), newTemplateCmd(), newSandboxCmd(), newRunCmd(), newBenchCmd())
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

// addDataDirFlag registers --data-dir (env MOAT_DATA_DIR).
func addDataDirFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "data-dir", envOr(defaultDataDir, "MOAT_DATA_DIR"),
		"state directory: database, templates, sandboxes (env MOAT_DATA_DIR)")
}

// storePath is the SQLite database inside a data directory.
func storePath(dataDir string) string { return filepath.Join(dataDir, "moat.db") }

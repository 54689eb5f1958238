package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/template"
)

// newBenchCmd measures create→first command through a running server against
// a bare OCI-runtime run of the same template rootfs, in one process.
func newBenchCmd() *cobra.Command {
	var (
		cf       clientFlags
		dataDir  string
		tmpl     string
		n        int
		baseline bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure create→first command (median, p99) against a bare runc/crun run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := bench.Config{Client: cf.client(), Template: tmpl, N: n}
			if baseline {
				cfg.RootfsDir = template.Layout{DataDir: dataDir}.RootfsDir(tmpl)
				cfg.Baseline = container.BareRun
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			rep.Print(cmd.OutOrStdout())
			return nil
		},
	}
	cf.register(cmd)
	addDataDirFlag(cmd, &dataDir)
	cmd.Flags().StringVar(&tmpl, "template", "base", "template to create sandboxes from")
	cmd.Flags().IntVarP(&n, "count", "n", 20, "iterations")
	cmd.Flags().BoolVar(&baseline, "baseline", true, "also time a bare OCI run of the template rootfs (needs root and --data-dir)")
	return cmd
}

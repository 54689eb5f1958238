package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/runtime/vm"
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
		vmJail   bool
		tplBuild bool
		start    bool
		verbose  bool
		runtimes []string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure create→first command (median, p99) against a bare runc/crun run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if vmJail {
				return benchJail(cmd, dataDir, tmpl, n)
			}
			if start {
				return benchStart(cmd, dataDir, tmpl, n)
			}
			if tplBuild {
				return benchTemplateBuild(cmd, dataDir, n, verbose)
			}
			cfg := bench.Config{Client: cf.client(), Template: tmpl, N: n, Runtimes: runtimes}
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
	cmd.Flags().BoolVar(&vmJail, "vm-jail", false,
		"instead: microVM create→first command with QEMU jailed vs not jailed, in this process (needs root and --data-dir; no server)")
	cmd.Flags().BoolVar(&tplBuild, "template-build", false,
		"instead: template build from a Debian image cold, fully cached and with the last step changed, in this process "+
			"(needs root, --data-dir with the base template, the Debian mirror; no server; -n rounds, default 3)")
	cmd.Flags().BoolVar(&start, "start", false,
		"instead: container create→first command unpooled and pooled vs a bare crun run, and 20 creates at once, "+
			"against servers this process runs (needs root and --data-dir; no other server on the host)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "with --template-build: print every build's log")
	cmd.Flags().StringSliceVar(&runtimes, "runtimes", nil,
		"measure create→first command on each of these runtimes (create metadata moat.runtime) of a server "+
			"running them all, e.g. container,gvisor,vm")
	return cmd
}

// benchJail prints the QEMU jail's cost: medians of microVM create→first
// command with and without the jail, alternating, and their ratio.
func benchJail(cmd *cobra.Command, dataDir, tmpl string, n int) error {
	jailed, unjailed, err := vm.CompareJail(cmd.Context(), vm.JailBench{DataDir: dataDir, TemplateID: tmpl,
		RootfsDir: template.Layout{DataDir: dataDir}.RootfsDir(tmpl), N: n})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	j := bench.Series{Name: "microVM create→first command, jailed", Samples: jailed}
	u := bench.Series{Name: "microVM create→first command, not jailed", Samples: unjailed}
	out := cmd.OutOrStdout()
	for _, s := range []bench.Series{j, u} {
		fmt.Fprintf(out, "%-44s n=%-3d median=%-10v p99=%v\n", s.Name, len(s.Samples),
			s.Median().Round(time.Millisecond), s.Percentile(99).Round(time.Millisecond))
	}
	if m := u.Median(); m > 0 {
		fmt.Fprintf(out, "ratio (median jailed / median not jailed) = %.2f\n", float64(j.Median())/float64(m))
	}
	return nil
}

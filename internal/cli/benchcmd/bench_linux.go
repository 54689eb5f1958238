package benchcmd

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/cli/benchcmd/density"
	"github.com/moatsh/moat/internal/template"
	moat "github.com/moatsh/moat/sdk/go"
)

// Shared is what the bench command reads from the flags it shares with
// moat's other commands, which the caller registers on it.
type Shared struct {
	Client   func() *moat.Client // --api-url, --api-key
	DataDir  func() string       // --data-dir
	Backends func() app.Backends // --oci-runtime, --vm-accel, …
}

// New returns `moat bench`: create→first command through a running server
// against a bare OCI-runtime run of the same template rootfs, in one
// process; its other modes are chosen by flags.
func New(sh Shared) *cobra.Command {
	var (
		tmpl     string
		n        int
		baseline bool
		vmJail   bool
		tplBuild bool
		start    bool
		dens     density.Config
		densOn   bool
		verbose  bool
		runtimes []string
		startRT  string
		ttiMode  string
		clu      clusterConfig
		files    bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure create→first command (median, p99) against a bare runc/crun run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clu.on {
				return benchCluster(cmd, clu, verbose)
			}
			dataDir := sh.DataDir()
			if vmJail {
				return benchJail(cmd, dataDir, sh.Backends(), tmpl, n)
			}
			if densOn {
				dens.DataDir, dens.Template, dens.Backends = dataDir, tmpl, sh.Backends()
				return density.Run(cmd, dens, benchServerWith)
			}
			if files {
				if !cmd.Flags().Changed("count") {
					n = 200
				}
				return benchFiles(cmd, dataDir, sh.Backends(), tmpl, n)
			}
			if start && verbose {
				serverLogLevel = slog.LevelDebug
			}
			if start && startRT == app.VMRuntime {
				return benchStartVM(cmd, dataDir, sh.Backends(), tmpl, n)
			}
			if start {
				return benchStart(cmd, dataDir, sh.Backends(), tmpl, n)
			}
			if tplBuild {
				return benchTemplateBuild(cmd, dataDir, sh.Backends().Container, n, verbose)
			}
			if ttiMode != "" {
				return benchTTI(cmd, sh.Client(), tmpl, ttiMode, n, startRT)
			}
			cfg := bench.Config{Client: sh.Client(), Template: tmpl, N: n, Runtimes: runtimes}
			if baseline {
				cfg.RootfsDir = template.Layout{DataDir: dataDir}.RootfsDir(tmpl)
				oci := sh.Backends().Container.OCIRuntime
				cfg.Baseline = func(ctx context.Context, rootfsDir string, args ...string) (time.Duration, error) {
					return app.BareRun(ctx, oci, rootfsDir, args...)
				}
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			rep.Print(cmd.OutOrStdout())
			return nil
		},
	}
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
	cmd.Flags().StringVar(&startRT, "runtime", "container",
		"with --start: the runtime, container or vm (vm: also a cold boot and a raw QEMU restore of the template's snapshot)")
	cmd.Flags().BoolVar(&files, "files", false,
		"instead: envd's file API (1 KiB write and read, -n rounds, default 200; 100 MiB upload and download) against a bare "+
			"net/http file server in the same sandbox behind the same proxy, on a server this process runs (needs root and --data-dir; no other server on the host)")
	cmd.Flags().BoolVar(&densOn, "density", false,
		"instead: bring up --containers container sandboxes and --vms microVMs of --vm-memory MiB at once on a server "+
			"this process runs (container,vm), run a command in each, print host memory per idle sandbox, kill them all "+
			"and check nothing is left (needs root and --data-dir; no other server on the host)")
	cmd.Flags().IntVar(&dens.Containers, "containers", 200, "with --density: container sandboxes")
	cmd.Flags().IntVar(&dens.VMs, "vms", 50, "with --density: microVM sandboxes")
	cmd.Flags().IntVar(&dens.VMMiB, "vm-memory", 256, "with --density: memory of each microVM, MiB")
	cmd.Flags().IntVar(&dens.ContainerMiB, "container-memory", 0, "with --density: memory each container reserves, MiB (default: the template's)")
	cmd.Flags().DurationVar(&dens.Idle, "idle", 10*time.Second, "with --density: idle time before each memory reading")
	cmd.Flags().StringVar(&ttiMode, "tti", "",
		"time to interactive (create + first command) of --count sandboxes (default 100) through a running server, "+
			"after ComputeSDK's methodology: sequential, staggered (200 ms apart), burst (all at once) or all; "+
			"--runtime picks the runtime (create metadata moat.runtime)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "with --template-build: print every build's log; with --start: the in-process server's debug log (each create's steps); "+
		"with --cluster: each run's statements")
	clu.register(cmd)
	cmd.Flags().StringSliceVar(&runtimes, "runtimes", nil,
		"measure create→first command on each of these runtimes (create metadata moat.runtime) of a server "+
			"running them all, e.g. container,gvisor,vm")
	return cmd
}

// benchTTI prints the time to interactive of n sandboxes per mode.
func benchTTI(cmd *cobra.Command, c *moat.Client, tmpl, mode string, n int, rt string) error {
	if !cmd.Flags().Changed("count") {
		n = 100
	}
	if !cmd.Flags().Changed("runtime") {
		rt = ""
	}
	modes := []string{mode}
	if mode == "all" {
		modes = bench.TTIModes
	}
	var reps []bench.TTIReport
	for _, m := range modes {
		rep, err := bench.RunTTI(cmd.Context(), bench.TTIConfig{Client: c, Template: tmpl, Mode: m, N: n, Runtime: rt})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		reps = append(reps, rep)
	}
	label := rt
	if label == "" {
		label = "server default"
	}
	bench.PrintTTI(cmd.OutOrStdout(), label, reps)
	return nil
}

// benchJail prints the QEMU jail's cost: medians of microVM create→first
// command with and without the jail, alternating, and their ratio.
func benchJail(cmd *cobra.Command, dataDir string, be app.Backends, tmpl string, n int) error {
	jailed, unjailed, err := app.CompareVMJail(cmd.Context(), app.VMJailBench{DataDir: dataDir, TemplateID: tmpl,
		RootfsDir: template.Layout{DataDir: dataDir}.RootfsDir(tmpl), N: n, VM: be.VM})
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

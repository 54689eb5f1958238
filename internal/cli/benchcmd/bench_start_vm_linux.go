package benchcmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/template"
)

// moat bench --start --runtime vm: issue 12's microVM half. The floors
// first, outside any server (vmbench.MeasureStart): a cold boot of the template
// (no snapshot) to its first command, and a raw restore of its snapshot
// (QEMU started by hand with -incoming defer, to QMP "running" and envd
// healthy), with the commands `true` and `bash -l -c true` timed in the
// restored guest. Then create→first command through an in-process server
// on the vm runtime: unpooled with no QEMU launched ahead (--vm-prelaunch
// 0, the baseline), unpooled with them (the next create's QEMU waits for
// its snapshot, see vm's slots), and with a pool (each create finding it
// full). Targets are printed beside the numbers, nothing asserts a time.

// vmPoolSize is the pool of the pooled vm server: each pooled create
// finds it full, and a small pool keeps memory and refill time low.
const vmPoolSize = 2

// benchStartVM runs the microVM half and prints it; n is the number of
// rounds of each kind.
func benchStartVM(cmd *cobra.Command, dataDir string, be app.Backends, tmpl string, n int) error {
	ctx, began := cmd.Context(), time.Now()
	floors, err := app.MeasureVMStart(ctx, app.VMStartBench{DataDir: dataDir, TemplateID: tmpl,
		RootfsDir: template.Layout{DataDir: dataDir}.RootfsDir(tmpl), N: max(n/2, 1), VM: be.VM})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	unpooled := startSeries{total: bench.Series{Name: "unpooled"}}
	pooled := startSeries{total: bench.Series{Name: fmt.Sprintf("pooled (pool of %d)", vmPoolSize)}}
	var bare *startSeries // unpooled with no QEMU launched ahead, when the others have them
	if be.VM.Prelaunch >= 0 {
		unpooled.total.Name = "unpooled (QEMU launched ahead)"
		bare = &startSeries{total: bench.Series{Name: "unpooled, --vm-prelaunch 0"}}
		nb := be
		nb.VM.Prelaunch = -1
		if err := vmCreates(ctx, dataDir, nb, tmpl, n, nil, bare); err != nil {
			return fmt.Errorf("bench: unpooled without prelaunch: %w", err)
		}
	}
	if err := vmCreates(ctx, dataDir, be, tmpl, n, nil, &unpooled); err != nil {
		return fmt.Errorf("bench: unpooled: %w", err)
	}
	pools := []orchestrator.PoolSpec{{Template: tmpl, Size: vmPoolSize}}
	if err := vmCreates(ctx, dataDir, be, tmpl, n, pools, &pooled); err != nil {
		return fmt.Errorf("bench: pooled: %w", err)
	}
	printStartVM(cmd.OutOrStdout(), tmpl, floors, unpooled, pooled, bare)
	fmt.Fprintf(cmd.OutOrStdout(), "(benchmark took %s)\n", time.Since(began).Round(time.Second))
	return nil
}

// vmCreates times n creates→first command on a server running the vm
// runtime with pools, after one untimed create (it may take the template
// snapshot); with a pool, each create waits for the pool to be full.
func vmCreates(ctx context.Context, dataDir string, be app.Backends, tmpl string, n int, pools []orchestrator.PoolSpec, out *startSeries) error {
	c, stop, err := benchServer(ctx, dataDir, app.VMRuntime, be, pools)
	if err != nil {
		return err
	}
	defer stop()
	for i := -1; i < n; i++ {
		if pools != nil {
			if err := waitPoolFull(ctx, c); err != nil {
				return err
			}
		}
		d, err := timeCreateFirstCommand(ctx, c, tmpl)
		if err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		if i >= 0 {
			out.add(d)
		}
	}
	return nil
}

// printStartVM writes the vm report with the targets beside it.
func printStartVM(w io.Writer, tmpl string, f *app.VMStartFloors, unpooled, pooled startSeries, bare *startSeries) {
	fmt.Fprintf(w, "microVM runtime (TCG unless KVM works), template %s: create→first command through the REST API and envd\n", tmpl)
	fmt.Fprintf(w, "(Go SDK CreateSandbox, then Run(\"true\") = /process.Process/Start of `bash -l -c true` via the proxy)\n")
	line := func(name string, s []time.Duration, note string) {
		b := bench.Series{Samples: s}
		fmt.Fprintf(w, "  %-44s n=%-3d median=%-9v p99=%-9v %s\n", name, len(s),
			b.Median().Round(time.Millisecond), b.Percentile(99).Round(time.Millisecond), note)
	}
	cold := float64(bench.Series{Samples: f.ColdBoot}.Median())
	ratio := func(s bench.Series) string {
		return fmt.Sprintf("%.3f× cold boot", float64(s.Median())/max(cold, 1))
	}
	line("cold boot → first command (no snapshot)", f.ColdBoot, "")
	line("raw restore: QEMU -incoming → envd healthy", f.RawRestore, "")
	line("  QEMU start → QMP connected", f.Launch, "")
	line("  migrate-incoming → loaded", f.Load, "")
	line("  cont + link up", f.Cont, "")
	line("  → envd /health answers", f.Health, "")
	line("in a restored guest: Process/Start /bin/true", f.True, "")
	line("  /bin/true, second", f.TrueSecond, "")
	line("  bash -l -c true, first", f.BashFirst, "")
	line("  bash -l -c true, second", f.BashSecond, "")
	line("  envd /health round trip, warm", f.HealthAgain, "")
	u, p := unpooled.total.Median(), pooled.total.Median()
	line(unpooled.total.Name, unpooled.total.Samples,
		fmt.Sprintf("%s  target p50 ≤ 0.4 s  %s", ratio(unpooled.total), verdict(u <= 400*time.Millisecond)))
	unpooled.printParts(line)
	if bare != nil {
		line(bare.total.Name, bare.total.Samples, fmt.Sprintf("%s  (launched ahead ÷ this: %.2f)", ratio(bare.total),
			float64(u)/max(float64(bare.total.Median()), 1)))
		bare.printParts(line)
	}
	line(pooled.total.Name, pooled.total.Samples,
		fmt.Sprintf("%s  target p50 ≤ 50 ms  %s", ratio(pooled.total), verdict(p <= 50*time.Millisecond)))
	pooled.printParts(line)
}

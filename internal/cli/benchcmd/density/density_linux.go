package density

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
	moat "github.com/moatsh/moat/sdk/go"
)

// Config is what one density run brings up.
type Config struct {
	DataDir    string
	Template   string // template of both kinds (the microVMs get a copy with VMMiB)
	Containers int
	VMs        int
	VMMiB      int
	// ContainerMiB, when set, is the memory the containers reserve (a
	// copy of Template with it, like the microVMs'): the capacity model
	// then holds that many more.
	ContainerMiB int
	Idle         time.Duration // how long the sandboxes idle before the memory is read
	Backends     app.Backends
}

// ServeFunc runs a server with cfg in this process until stop and returns
// a client with a fresh API key (benchcmd's in-process server).
type ServeFunc func(ctx context.Context, cfg app.Config) (c *moat.Client, stop func(), err error)

// densityCreatesAtOnce bound the creates in flight per runtime (the
// server's admission runs admission.DefaultConcurrency of them at once
// whatever the client does; more only queue). microVMs boot under TCG on
// this host: four at a time.
const (
	densityContainersAtOnce = 8
	densityVMsAtOnce        = 4
	densityCommandsAtOnce   = 16
	densityCommandTimeout   = 3 * time.Minute
)

// densityVMTemplateID is the ID of the template registered for this run:
// the benchmark template's root filesystem with vmMiB of memory and one
// vCPU. The vm runtime names a template's image directory after its
// lower-cased ID, so "Base" shares base's disk image (no second ext4 image
// is made) and keeps its own 256 MiB snapshot in it across runs; the row
// itself is removed after the run.
func densityVMTemplateID(tmpl string) string { return strings.ToUpper(tmpl[:1]) + tmpl[1:] }

// densityContainerTemplateID is the ID of the containers' template copy
// (Config.ContainerMiB) beside the microVMs' vmID.
func densityContainerTemplateID(vmID string) string { return vmID + "C" }

// member is one sandbox of the run.
type member struct {
	runtime string
	tag     string // the value of DENSITY_TAG in its environment
	sb      *moat.Sandbox
}

// fleet is every sandbox the run created, for the commands, the
// measurements and the kill. Safe for concurrent use.
type fleet struct {
	mu      sync.Mutex
	members []member
}

func (f *fleet) add(m member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = append(f.members, m)
}

func (f *fleet) all() []member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]member(nil), f.members...)
}

// Run runs the whole density test and prints it; serve runs the server.
func Run(cmd *cobra.Command, cfg Config, serve ServeFunc) (retErr error) {
	ctx, out, began := cmd.Context(), cmd.OutOrStdout(), time.Now()
	if cfg.Template == "" {
		return errors.New("bench --density: empty template")
	}
	leaksBefore := hostLeftovers(cfg.DataDir)
	vmTpl, unregister, err := registerDensityTemplate(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench --density: %w", err)
	}
	defer func() { retErr = errors.Join(retErr, unregister()) }()
	base := readHost()
	c, stop, err := serve(ctx, app.Config{DataDir: cfg.DataDir, Runtime: "container,vm", Backends: cfg.Backends,
		Admission: admission.Config{Concurrency: admission.DefaultConcurrency, Queue: 1024, MaxWait: 10 * time.Minute},
		// The base template reserves 512 MiB per container: 200 of them
		// and the microVMs reserve more than 4 × this host's 24 GiB.
		Capacity: admission.Capacity{MemOvercommit: 16}})
	if err != nil {
		return fmt.Errorf("bench --density: %w", err)
	}
	var f fleet
	defer func() {
		killed := time.Now()
		kerr := killFleet(ctx, &f)
		stop()
		fmt.Fprintf(out, "killed %d sandboxes in %s\n", len(f.all()), time.Since(killed).Round(time.Millisecond))
		lerr := checkLeftovers(ctx, cfg.DataDir, leaksBefore)
		if lerr == nil && kerr == nil {
			fmt.Fprintln(out, "no leftovers on the host (containers, netns, veths, mounts, loop devices, sandbox dirs, QEMU, cgroups)")
		}
		retErr = errors.Join(retErr, kerr, lerr)
		fmt.Fprintf(out, "(benchmark took %s)\n", time.Since(began).Round(time.Second))
	}()
	rep, err := runDensity(ctx, out, c, cfg, vmTpl, &f, base)
	if err != nil {
		return fmt.Errorf("bench --density: %w", err)
	}
	rep.print(out)
	return nil
}

// runDensity brings the sandboxes up, runs a command in each and reads
// the host at each step.
func runDensity(ctx context.Context, out io.Writer, c *moat.Client, cfg Config, vmTpl string, f *fleet, base hostSample) (*densityReport, error) {
	rep := &densityReport{cfg: cfg, base: base, server: readHost()}
	t := time.Now()
	ctTpl := cfg.Template
	if cfg.ContainerMiB > 0 {
		ctTpl = densityContainerTemplateID(vmTpl)
	}
	if err := bringUp(ctx, out, c, f, "container", ctTpl, cfg.Containers, densityContainersAtOnce); err != nil {
		return nil, err
	}
	rep.containersUp = time.Since(t)
	fmt.Fprintf(out, "%d containers up in %s\n", cfg.Containers, rep.containersUp.Round(time.Millisecond))
	time.Sleep(cfg.Idle)
	rep.containers = readHost()
	t = time.Now()
	if err := bringUp(ctx, out, c, f, "vm", vmTpl, cfg.VMs, densityVMsAtOnce); err != nil {
		return nil, err
	}
	rep.vmsUp = time.Since(t)
	fmt.Fprintf(out, "%d microVMs (%d MiB) up in %s\n", cfg.VMs, cfg.VMMiB, rep.vmsUp.Round(time.Millisecond))
	t = time.Now()
	if err := checkFleet(ctx, f); err != nil {
		return nil, err
	}
	rep.checked = time.Since(t)
	fmt.Fprintf(out, "all %d sandboxes answered a command (echo of their own env var) in %s\n",
		len(f.all()), rep.checked.Round(time.Millisecond))
	time.Sleep(cfg.Idle)
	rep.all = readHost()
	rep.sandboxes = readSandboxes(cfg.DataDir, f.all())
	var vmIDs []string
	for _, m := range f.all() {
		if m.runtime == "vm" {
			vmIDs = append(vmIDs, m.sb.ID)
		}
	}
	var err error
	if rep.share, err = sampleSharing(cfg.DataDir, vmIDs, 5); err != nil {
		return nil, fmt.Errorf("guest RAM sharing: %w", err)
	}
	return rep, nil
}

// registerDensityTemplate registers the microVM template of the run (see
// densityVMTemplateID) and returns its ID and how to remove it.
func registerDensityTemplate(ctx context.Context, cfg Config) (string, func() error, error) {
	db, err := store.Open(ctx, cfg.DataDir+"/moat.db")
	if err != nil {
		return "", nil, err
	}
	defer db.Close()
	tpl, err := db.GetTemplate(ctx, cfg.Template)
	if err != nil {
		return "", nil, err
	}
	id := densityVMTemplateID(tpl.ID)
	vt := store.Template{ID: id, Name: "density-" + tpl.Name + fmt.Sprintf("-%dm", cfg.VMMiB), BuildID: tpl.BuildID,
		RootfsDir: tpl.RootfsDir, CPUCount: 1, MemoryMB: cfg.VMMiB, DiskSizeMB: tpl.DiskSizeMB,
		EnvdVersion: tpl.EnvdVersion, Runtime: "vm"}
	if err := db.UpsertTemplate(ctx, vt); err != nil {
		return "", nil, err
	}
	ids := []string{id}
	if cfg.ContainerMiB > 0 {
		ct := vt
		ct.ID, ct.Name, ct.MemoryMB, ct.CPUCount, ct.Runtime = densityContainerTemplateID(id),
			"density-"+tpl.Name+fmt.Sprintf("-c%dm", cfg.ContainerMiB), cfg.ContainerMiB, tpl.CPUCount, "container"
		if err := db.UpsertTemplate(ctx, ct); err != nil {
			return "", nil, err
		}
		ids = append(ids, ct.ID)
	}
	unregister := func() error {
		db, err := store.Open(context.WithoutCancel(ctx), cfg.DataDir+"/moat.db")
		if err != nil {
			return err
		}
		defer db.Close()
		var errs []error
		for _, id := range ids {
			errs = append(errs, db.DeleteTemplate(context.WithoutCancel(ctx), id))
		}
		return errors.Join(errs...)
	}
	return id, unregister, nil
}

// bringUp creates n sandboxes of tmpl on runtime rt, k at a time, each
// with its tag in its environment, and runs a first command in each.
// On failures it prints how many came up and why the others did not
// (the first limit a growing host hits).
func bringUp(ctx context.Context, out io.Writer, c *moat.Client, f *fleet, rt, tmpl string, n, k int) error {
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tag := fmt.Sprintf("%s-%d", rt, i)
			sb, err := c.CreateSandbox(ctx, moat.CreateOptions{Template: tmpl, Timeout: 30 * time.Minute,
				Metadata: map[string]string{orchestrator.MetadataRuntime: rt}, EnvVars: map[string]string{"DENSITY_TAG": tag}})
			if err != nil {
				errs[i] = fmt.Errorf("%s: create: %w", tag, err)
				return
			}
			m := member{runtime: rt, tag: tag, sb: sb}
			f.add(m)
			errs[i] = echoTag(ctx, m)
		}()
	}
	wg.Wait()
	if failed := printFailures(out, rt, n, errs); failed != nil {
		return failed
	}
	return nil
}

// sandboxSpecific are the parts of an error that differ between sandboxes.
var sandboxSpecific = regexp.MustCompile(`\bi[a-z0-9]{20}\b|\b\d+\.\d+\.\d+\.\d+(:\d+)?\b|(container|vm)-\d+`)

// printFailures prints how many of n sandboxes of rt failed, by reason,
// and returns an error saying so (nil when none failed).
func printFailures(out io.Writer, rt string, n int, errs []error) error {
	reasons := map[string]int{}
	failed := 0
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if failed++; first == nil {
			first = err
		}
		r := sandboxSpecific.ReplaceAllString(err.Error(), "…")
		if len(r) > 200 {
			r = r[:200] + "…"
		}
		reasons[r]++
	}
	if failed == 0 {
		return nil
	}
	fmt.Fprintf(out, "%d of %d %s sandboxes came up; the others failed:\n", n-failed, n, rt)
	for _, r := range slices.SortedFunc(maps.Keys(reasons), func(a, b string) int { return reasons[b] - reasons[a] }) {
		fmt.Fprintf(out, "  %5d × %s\n", reasons[r], r)
	}
	return fmt.Errorf("%d of %d %s sandboxes failed (the first: %w)", failed, n, rt, first)
}

// echoTag runs `echo $DENSITY_TAG` in m's sandbox and checks the answer.
func echoTag(ctx context.Context, m member) error {
	ctx, cancel := context.WithTimeout(ctx, densityCommandTimeout)
	defer cancel()
	var stdout strings.Builder
	code, err := m.sb.Run(ctx, "echo $DENSITY_TAG", moat.RunOptions{Stdout: &stdout})
	switch {
	case err != nil:
		return fmt.Errorf("%s (%s): run: %w", m.tag, m.sb.ID, err)
	case code != 0:
		return fmt.Errorf("%s (%s): exit code %d", m.tag, m.sb.ID, code)
	case strings.TrimSpace(stdout.String()) != m.tag:
		return fmt.Errorf("%s (%s): answered %q", m.tag, m.sb.ID, stdout.String())
	}
	return nil
}

// checkFleet runs echoTag in every sandbox, densityCommandsAtOnce at a time.
func checkFleet(ctx context.Context, f *fleet) error {
	return forMembers(f.all(), densityCommandsAtOnce, func(m member) error { return echoTag(ctx, m) })
}

// killFleet kills every sandbox of f, 8 at a time.
func killFleet(ctx context.Context, f *fleet) error {
	ctx = context.WithoutCancel(ctx)
	return forMembers(f.all(), 8, func(m member) error {
		kctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := m.sb.Kill(kctx); err != nil {
			return fmt.Errorf("kill %s (%s): %w", m.tag, m.sb.ID, err)
		}
		return nil
	})
}

// forMembers calls fn on every member, k at a time, and joins the errors.
func forMembers(ms []member, k int, fn func(member) error) error {
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	errs := make([]error, len(ms))
	for i, m := range ms {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(m)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

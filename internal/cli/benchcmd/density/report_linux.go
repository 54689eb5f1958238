package density

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/dialrace"
)

// densityReport is what one density run measured.
type densityReport struct {
	cfg                           Config
	base, server, containers, all hostSample // before the server, server up, containers up, everything up
	sandboxes                     []sandboxMemory
	share                         shareSample
	containersUp, vmsUp, checked  time.Duration
}

// meminfo figures of a sample, MiB.
type memFigures struct {
	notAvail, usedNoCache, cached, shmem, anon, kernel float64
}

func figures(h hostSample) memFigures {
	m := func(k string) float64 { return float64(h.mem[k]) / 1024 }
	return memFigures{
		notAvail:    m("MemTotal") - m("MemAvailable"),
		usedNoCache: m("MemTotal") - m("MemFree") - m("Buffers") - m("Cached") - m("SReclaimable"),
		cached:      m("Cached") + m("Buffers"),
		shmem:       m("Shmem"),
		anon:        m("AnonPages"),
		kernel:      m("Slab") + m("KernelStack") + m("PageTables"),
	}
}

// print writes the report: host deltas per sandbox for each step, then the
// sandboxes' own processes and cgroups.
func (r *densityReport) print(w io.Writer) {
	nc, nv := float64(max(r.cfg.Containers, 1)), float64(max(r.cfg.VMs, 1))
	b, s, c, a := figures(r.base), figures(r.server), figures(r.containers), figures(r.all)
	fmt.Fprintf(w, "host memory per idle sandbox (MiB; /proc/meminfo deltas, %s idle before each reading)\n", r.cfg.Idle)
	fmt.Fprintf(w, "  %-44s %12s %12s\n", "", fmt.Sprintf("container×%d", r.cfg.Containers), fmt.Sprintf("microVM×%d", r.cfg.VMs))
	per := func(d, n float64, count int) string {
		if count == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", d/n)
	}
	row := func(name string, f func(memFigures) float64) {
		fmt.Fprintf(w, "  %-44s %12s %12s\n", name, per(f(c)-f(s), nc, r.cfg.Containers), per(f(a)-f(c), nv, r.cfg.VMs))
	}
	row("MemTotal − MemAvailable", func(m memFigures) float64 { return m.notAvail })
	row("used, page cache excluded (free's used)", func(m memFigures) float64 { return m.usedNoCache })
	row("page cache (Cached + Buffers)", func(m memFigures) float64 { return m.cached })
	row("  of it Shmem (tmpfs, shared memory)", func(m memFigures) float64 { return m.shmem })
	row("AnonPages", func(m memFigures) float64 { return m.anon })
	row("kernel (Slab + KernelStack + PageTables)", func(m memFigures) float64 { return m.kernel })
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	fmt.Fprintf(w, "  %-44s %12s %12s\n", "server RSS (this process: server + client)",
		per(mib(r.containers.self.rss-r.server.self.rss), nc, r.cfg.Containers), per(mib(r.all.self.rss-r.containers.self.rss), nv, r.cfg.VMs))
	fmt.Fprintf(w, "  server start: MemTotal − MemAvailable +%.0f MiB, this process's RSS %.0f MiB (before the sandboxes)\n",
		s.notAvail-b.notAvail, mib(r.server.self.rss))
	r.printSandboxes(w)
	r.share.print(w)
	r.printNewProcesses(w)
	r.printGrown(w)
	fmt.Fprintf(w, "up: %d containers in %s, %d microVMs in %s; a command in every one in %s\n",
		r.cfg.Containers, r.containersUp.Round(time.Millisecond), r.cfg.VMs, r.vmsUp.Round(time.Millisecond),
		r.checked.Round(time.Millisecond))
	// Since the firewall's port-guard fix none should stall (docs/benchmarks.md,
	// "a lost sandbox"); the race absorbs one, and this makes it seen.
	fmt.Fprintf(w, "connects to sandboxes that stalled 1 s and were raced: %d\n", dialrace.Stalls())
}

// printSandboxes prints medians over each runtime's sandboxes of their
// cgroup usage and their processes' memory.
func (r *densityReport) printSandboxes(w io.Writer) {
	for _, rt := range []string{"container", "vm"} {
		var usage, anon, file, envdRss, envdPss, qRss, qPss, qAnon, gRss, gPss, gSize, over, memFile []int64
		for _, s := range r.sandboxes {
			if s.runtime != rt {
				continue
			}
			usage, anon, file = append(usage, s.cg.usage), append(anon, s.cg.anon), append(file, s.cg.file)
			memFile = append(memFile, s.memFileKiB)
			for _, p := range s.procs {
				switch {
				case p.isEnvd:
					envdRss, envdPss = append(envdRss, p.rss), append(envdPss, p.pss)
				case p.isQEMU:
					qRss, qPss, qAnon = append(qRss, p.rss), append(qPss, p.pss), append(qAnon, p.anon)
					gRss, gPss, gSize = append(gRss, p.guestRss), append(gPss, p.guestPss), append(gSize, p.guestSize)
					over = append(over, p.rss-p.guestRss)
				}
			}
		}
		if len(usage) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s sandboxes (n=%d), medians in MiB:\n", rt, len(usage))
		fmt.Fprintf(w, "  cgroup memory usage %.1f (anon %.1f, page cache %.1f)\n", medMiB(usage), medMiB(anon), medMiB(file))
		if len(envdRss) > 0 {
			fmt.Fprintf(w, "  envd RSS %.1f, PSS %.1f (n=%d)\n", medMiB(envdRss), medMiB(envdPss), len(envdRss))
		}
		if len(qRss) > 0 {
			fmt.Fprintf(w, "  QEMU RSS %.1f, PSS %.1f, anon (QEMU's own: TCG code cache, device state) %.1f (n=%d)\n",
				medMiB(qRss), medMiB(qPss), medMiB(qAnon), len(qRss))
			fmt.Fprintf(w, "  guest RAM mapping (%.0f MiB): resident %.1f, PSS %.1f; QEMU beyond resident guest RAM %.1f\n",
				medMiB(gSize), medMiB(gRss), medMiB(gPss), medMiB(over))
			fmt.Fprintf(w, "  memory file on disk (allocated) %.1f\n", medMiB(memFile))
		}
	}
}

// printNewProcesses prints the processes that appeared since before the
// server started, by name: count and PSS total per sandbox.
func (r *densityReport) printNewProcesses(w io.Writer) {
	type agg struct {
		n        int
		pss, rss int64
	}
	by := map[string]*agg{}
	for pid, p := range r.all.procs {
		if _, old := r.base.procs[pid]; old || p.isServer {
			continue
		}
		a := by[p.comm]
		if a == nil {
			a = &agg{}
			by[p.comm] = a
		}
		a.n++
		a.pss += p.pss
		a.rss += p.rss
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]].pss > by[names[j]].pss })
	fmt.Fprintf(w, "new host processes by name (all %d sandboxes, and any other work on the host): count, PSS total MiB, RSS total MiB\n",
		r.cfg.Containers+r.cfg.VMs)
	for _, n := range names {
		a := by[n]
		fmt.Fprintf(w, "  %-20s %5d %10.1f %10.1f\n", n, a.n, float64(a.pss)/1024, float64(a.rss)/1024)
	}
}

// printGrown prints the processes that existed before the server started
// and grew the most since (other work on the host shows here: the host
// deltas above include it).
func (r *densityReport) printGrown(w io.Writer) {
	type grown struct {
		name string
		pid  int
		d    int64
	}
	var gs []grown
	for pid, p := range r.all.procs {
		if old, ok := r.base.procs[pid]; ok && !p.isServer && p.comm == old.comm {
			gs = append(gs, grown{p.comm, pid, p.anon - old.anon})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].d > gs[j].d })
	var parts []string
	for _, g := range gs[:min(3, len(gs))] {
		parts = append(parts, fmt.Sprintf("%s[%d] %+.1f", g.name, g.pid, float64(g.d)/1024))
	}
	fmt.Fprintf(w, "older processes that grew most (anon MiB; not the sandboxes', but in the host deltas): %s\n",
		strings.Join(parts, ", "))
}

func medMiB(v []int64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return float64(s[len(s)/2]) / 1024
}

// hostLeftovers lists what scripts/test.sh's final leak check looks for:
// OCI containers of the data dir, moat netns and host veths, mounts and
// loop devices of sandboxes, sandbox directories, QEMU processes of
// sandboxes and their cgroups.
func hostLeftovers(dataDir string) []string {
	var out []string
	for _, rt := range []string{"runc", "crun"} {
		if _, err := os.Stat("/run/moat/" + rt); err == nil {
			b, _ := exec.Command(rt, "--root", "/run/moat/"+rt, "list").Output()
			out = append(out, linesWith(string(b), dataDir+"/sandboxes/")...)
		}
	}
	out = append(out, globNames("/run/netns/moat-*")...)
	out = append(out, globNames("/sys/class/net/mh*")...)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, sub := range []string{"/sandboxes/", "/vm/sandboxes/", "/gvisor/sandboxes/"} {
			out = append(out, linesWith(string(b), dataDir+sub)...)
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, _ := os.ReadFile(l); strings.Contains(string(b), dataDir+"/sandboxes/") {
			out = append(out, l+": "+strings.TrimSpace(string(b)))
		}
	}
	for _, d := range []string{"sandboxes", "vm/sandboxes", "gvisor/sandboxes"} {
		out = append(out, globNames(filepath.Join(dataDir, d, "*"))...)
	}
	for pid, p := range readHost().procs {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); p.isQEMU && strings.Contains(string(cmd), "moat-") {
			out = append(out, fmt.Sprintf("qemu pid %d", pid))
		}
	}
	for _, g := range append(globNames("/sys/fs/cgroup/moat/*"), globNames("/sys/fs/cgroup/*/moat/*")...) {
		if fi, err := os.Stat(g); err == nil && fi.IsDir() {
			out = append(out, g)
		}
	}
	return out
}

func linesWith(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

func globNames(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// checkLeftovers waits up to a minute for the host to hold nothing of the
// run's sandboxes beyond what it held before, and names what stays.
func checkLeftovers(ctx context.Context, dataDir string, before []string) error {
	had := map[string]bool{}
	for _, l := range before {
		had[l] = true
	}
	var left []string
	for deadline := time.Now().Add(time.Minute); ; {
		left = left[:0]
		for _, l := range hostLeftovers(dataDir) {
			if !had[l] {
				left = append(left, l)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if len(left) > 0 {
		return fmt.Errorf("leftovers on the host after the kill:\n  %s", strings.Join(left, "\n  "))
	}
	return nil
}

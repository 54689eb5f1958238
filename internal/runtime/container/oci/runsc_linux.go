package oci

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// RunscConfig selects how runsc runs sandboxes (see package gvisor).
type RunscConfig struct {
	// Platform is runsc's --platform: "" leaves runsc's default (systrap
	// since 2023, ptrace before; both work without KVM), or "ptrace",
	// "systrap", "kvm".
	Platform string
	// Network is runsc's --network: "sandbox" (default: gVisor's own
	// network stack inside the sandbox's netns from netpolicy) or "host"
	// (the host kernel's stack in that netns).
	Network string
	// Binary is the runsc to run ("" = runsc on PATH).
	Binary string
	// Flags are more runsc global flags (e.g. --debug --debug-log=DIR/).
	Flags []string
}

// PickRunsc finds runsc and checks that it runs.
func PickRunsc(ctx context.Context, log *slog.Logger, c RunscConfig, root string) (*CLI, error) {
	if c.Binary == "" {
		c.Binary = "runsc"
	}
	bin, err := exec.LookPath(c.Binary)
	if err != nil {
		return nil, fmt.Errorf("runsc not found (apt-get install runsc): %w", errdefs.ErrUnavailable)
	}
	o := &CLI{Name: "runsc", bin: bin, Root: root, flags: runscFlags(c)}
	if err := os.MkdirAll(runscProcDir, 0o555); err != nil {
		return nil, fmt.Errorf("runsc: %w", err)
	}
	out, err := o.Command(ctx, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("runsc --version: %w: %s", err, bytes.TrimSpace(out))
	}
	version, _, _ := strings.Cut(string(out), "\n")
	if runscTooOld(version) {
		log.WarnContext(ctx, "this runsc is from before 2023: statx with AT_NO_AUTOMOUNT fails with EINVAL inside sandboxes, "+
			"so `ls -l` and `stat` fail; scripts/setup.sh installs a current runsc in /usr/local/bin", "version", version)
	}
	log.InfoContext(ctx, "OCI runtime chosen", "oci", "runsc", "version", strings.TrimSpace(version),
		"platform", c.Platform, "network", c.Network)
	return o, nil
}

// runscFlags are the global flags for c. --overlay2=none: the sandbox's
// writes go through runsc's gofer to the overlay upper dir on the host
// (disk quota, template builds reading the upper dir), not into a
// sandbox-internal overlay (newer runsc's default root:self).
func runscFlags(c RunscConfig) []string {
	f := []string{"--network", c.Network, "--overlay2", "none"}
	if c.Platform != "" {
		f = append(f, "--platform", c.Platform)
	}
	return append(f, c.Flags...)
}

// runscTooOld reports whether version (`runsc --version`'s first line) is
// a release before 2023: those (Debian 12's 0.0~20221219) answer statx
// with AT_NO_AUTOMOUNT with EINVAL, so coreutils' ls -l and stat fail.
func runscTooOld(version string) bool {
	_, date, ok := strings.Cut(version, "0.0~")
	return ok && len(date) >= 4 && date[:4] < "2023"
}

// renamed spells crun/runc's short flags as runsc wants them.
func (o *CLI) renamed(args []string) []string {
	if o.Name != "runsc" || len(args) < 2 {
		return args
	}
	long := map[string]map[string]string{
		"run":    {"-d": "-detach"},
		"delete": {"-f": "-force"},
		"list":   {"-f": "-format"},
	}[args[0]]
	out := append([]string(nil), args...)
	for i, a := range out[1:] {
		if l, ok := long[a]; ok {
			out[i+1] = l
		}
	}
	return out
}

// runscRun runs `runsc run` in a private mount namespace whose
// /proc/sys lacks net. runsc (this version) tells the host's network
// namespace from a sandbox's by /proc/sys/net/core/rmem_default existing
// only in the former; Linux 6.x shows that file in every namespace, so
// runsc would refuse every sandbox network ("cannot run with network
// enabled in root network namespace"). Only runsc's own check reads the
// path: the sandbox keeps its netns from netpolicy. /proc/sys becomes a
// tmpfs holding binds of the other sysctl directories of a fresh proc on
// runscProcDir, which also keeps one proc fully visible: the gofer runs in
// the sandbox's user namespace and may mount its own proc only then
// (Linux's mount_too_revealing).
func (o *CLI) runscRun(ctx context.Context, full []string) *exec.Cmd {
	const script = `p=` + runscProcDir + ` && mount -t proc proc $p && mount -t tmpfs -o size=16k,mode=0555 moat-sysctl /proc/sys &&
for d in $(ls $p/sys); do [ $d = net ] || { mkdir /proc/sys/$d && mount --bind $p/sys/$d /proc/sys/$d; } || exit 1; done &&
exec "$0" "$@"`
	return exec.CommandContext(ctx, "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script, o.bin}, full...)...)
}

// runscProcDir is an empty directory on which `runsc run`'s private mount
// namespace mounts a proc (see runscRun); PickRunsc creates it.
const runscProcDir = "/run/moat/runsc-proc"

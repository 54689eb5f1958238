package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
)

// A lean namespace is where crun creates a container once the host holds
// many sandboxes. Each sandbox puts six mounts in the host's table (its
// disk, overlay, lower layer, sysfs, log and netns), and every container
// crun creates starts as a copy of the namespace crun runs in: the copy,
// making it private, crun's read of /proc/self/mountinfo and the old
// root's unmount after pivot_root each walk the whole table, so a create
// cost more the more sandboxes were alive (6 % of a burst of 100's CPU,
// growing with every sandbox).
//
// The lean base is a copy of the host's namespace made once, private, with
// every sandbox's, volume's and network namespace's mount taken out (see
// perSandbox; and, on a hybrid cgroup host, the cgroup2 mount crun
// refuses, see runHidden). Each `run` or `create` gets a namespace of
// its own copied from that base, into which a clone of its bundle's
// mounts (open_tree) and of the bind mounts and namespace paths its
// config.json takes from outside the bundle (volumes, its netns) is moved: crun then copies about thirty
// mounts whatever the number of sandboxes. The host's table keeps every
// mount as before (package hostfs, template GC and the leak checks read
// it). The base holds the host's other mounts of the time it was made:
// one of them unmounted later stays alive there until the server stops.
type leanNS struct {
	base   *os.File    // the base namespace (/proc/thread-self/ns/mnt of the thread that made it)
	under  string      // the sandbox directories' directory: bundles under it start here
	closed atomic.Bool // Close was called: RunCmd goes back to runHidden
}

// EnableLean makes crun create containers in lean namespaces (see leanNS)
// for bundles under sandboxes, which the base keeps reachable (a mount at
// or above it stays, whatever perSandbox says). It makes the base at once;
// on an error (a kernel without open_tree, say) containers are created as
// before. Only crun: runc and runsc keep their usual namespace. Call
// before the first command.
func (o *CLI) EnableLean(sandboxes string) error {
	if o.Name != "crun" {
		return nil
	}
	sandboxes = filepath.Clean(sandboxes)
	base, err := makeLeanBase(o.hideCgroup2, sandboxes)
	if err != nil {
		return err
	}
	o.lean = &leanNS{base: base, under: sandboxes}
	return nil
}

// Close releases the lean base; the containers already made keep their
// namespaces, and no container can be created after it. Idempotent.
func (o *CLI) Close() error {
	if o.lean == nil {
		return nil
	}
	o.lean.closed.Store(true)
	if err := o.lean.base.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// perSandbox reports whether m is a mount the lean base leaves out: one
// under a sandbox directory of any data dir (…/sandboxes/<id>/…: disks,
// overlays, lower layers, sysfs, logs, idmapped volume copies), a
// loop-backed one (volumes, sandbox disks) or a network namespace's. The
// base would otherwise keep them, and what they hold (loop devices,
// network namespaces and their veths), alive after the host let them go.
func perSandbox(m mountinfo.Entry) bool {
	return strings.Contains(m.MountPoint, "/sandboxes/") || strings.HasPrefix(m.Source, "/dev/loop") || m.FSType == "nsfs"
}

// within reports whether path is dir or under it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// makeLeanBase makes the base namespace on a thread of its own, which
// exits with it (the namespace lives on through the returned file).
func makeLeanBase(hideCgroup2 bool, keep string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	c := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := func() (*os.File, error) {
			if err := unshareMounts(hideCgroup2); err != nil { // mountns_linux.go
				return nil, err
			}
			ms, err := mountinfo.Read("/proc/thread-self/mountinfo")
			if err != nil {
				return nil, err
			}
			for _, m := range slices.Backward(ms) { // children first
				if !perSandbox(m) || within(keep, m.MountPoint) {
					continue
				}
				if err := unix.Unmount(m.MountPoint, unix.MNT_DETACH); err != nil &&
					!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
					return nil, fmt.Errorf("unmount %s: %w", m.MountPoint, err)
				}
			}
			return os.Open("/proc/thread-self/ns/mnt")
		}()
		c <- result{f, err}
	}()
	r := <-c
	if r.err != nil {
		return nil, fmt.Errorf("lean mount namespace: %w", r.err)
	}
	return r.f, nil
}

// run runs cmd to its end in a new namespace copied from the base, with
// bundle's mounts and the outside bind mounts of its config.json cloned
// in from the calling thread's namespace (the host's).
func (l *leanNS) run(cmd *exec.Cmd, bundle string) error {
	bundle = filepath.Clean(bundle)
	outside, err := outsideBinds(bundle)
	if err != nil {
		return err
	}
	return l.runWith(cmd, append([]string{bundle}, outside...))
}

// runWith runs cmd to its end, from a thread of its own, in a new
// namespace copied from the base with the mounts at paths cloned in; none
// for RunCmd's short commands (kill, delete, state). The thread waits for
// cmd before it exits, so that it, not cmd, drops the namespace last:
// freeing a mount namespace waits for an RCU grace period, which the
// command's exit paid before, and our wait for it with it (~8 ms per
// create in a burst here); the thread's exit pays it now, waited for by
// nobody.
func (l *leanNS) runWith(cmd *exec.Cmd, paths []string) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := l.startLocked(cmd, paths); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Wait()
	}()
	return <-errc
}

// startLocked is start on its own thread, which it moves out of the
// host's namespace for good.
func (l *leanNS) startLocked(cmd *exec.Cmd, paths []string) error {
	trees := make([]int, 0, len(paths))
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	for _, p := range paths { // still in the host's namespace
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("lean mount namespace: clone %s: %w", p, err)
		}
		trees = append(trees, fd)
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("lean mount namespace: unshare fs: %w", err)
	}
	if err := unix.Setns(int(l.base.Fd()), unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("lean mount namespace: enter the base: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("lean mount namespace: unshare: %w", err)
	}
	for i, fd := range trees {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, paths[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("lean mount namespace: attach %s: %w", paths[i], err)
		}
	}
	return cmd.Start()
}

// leanFor returns the lean namespace bundle's `run` or `create` starts
// in, nil when lean mode is off or the bundle is not a sandbox directory.
func (o *CLI) leanFor(bundle string) *leanNS {
	if l := o.lean; l != nil && within(filepath.Clean(bundle), l.under) && filepath.Clean(bundle) != l.under {
		return l
	}
	return nil
}

// outsideBinds lists the sources of the bind mounts and the namespace
// paths in bundle's config.json that are not under bundle (a sandbox's
// volumes, its network namespace): the base does not hold them, as they
// are mounted after it was made, or taken out of it.
func outsideBinds(bundle string) ([]string, error) {
	name := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("lean mount namespace: %w", err)
	}
	var cfg struct {
		Mounts []struct {
			Type    string   `json:"type"`
			Source  string   `json:"source"`
			Options []string `json:"options"`
		} `json:"mounts"`
		Linux struct {
			Namespaces []struct {
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("lean mount namespace: %s: %w", name, err)
	}
	var out []string
	add := func(p string) {
		if p = filepath.Clean(p); filepath.IsAbs(p) && !within(p, bundle) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, m := range cfg.Mounts {
		if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
			add(m.Source)
		}
	}
	for _, ns := range cfg.Linux.Namespaces { // the network namespace's bind mount (/run/netns/…)
		if ns.Path != "" {
			add(ns.Path)
		}
	}
	return out, nil
}

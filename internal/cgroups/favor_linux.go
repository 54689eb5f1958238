package cgroups

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
)

// A sandbox create moves processes into new cgroups (the OCI runtime its
// init, the vm runtime QEMU), and by default every such move waits for an
// RCU grace period: writing cgroup.procs takes the kernel's global
// cgroup_threadgroup_rwsem for writing, and that percpu rwsem synchronises
// with its readers (every fork and exit) through RCU. On this project's
// 2-core hosts that is 3–13 ms per move, paid once or twice by every
// container create and by the bare crun run it is compared with (stop 23
// measured 5.8 ms for two moves, 0.33 ms with the option below).
// favordynmods (Linux ≥ 6.0, Documentation/admin-guide/cgroup-v2.rst)
// keeps the rwsem in its slow-reader mode instead: moves no longer wait,
// forks and exits take a shared atomic instead of a per-CPU counter — the
// trade a host whose hot path is making sandboxes wants. The flag is
// global (one rwsem for every hierarchy), set by remounting the cgroup2
// mount.

// favorDynMods remounts the first cgroup2 mount listed in mountinfoPath
// with favordynmods; changed is false when it was on already or there is
// no cgroup2 mount.
func favorDynMods(mountinfoPath string) (changed bool, err error) {
	es, err := mountinfo.Read(mountinfoPath)
	if err != nil {
		return false, fmt.Errorf("cgroup favordynmods: %w", err)
	}
	for _, e := range es {
		r, ok := cgroup2Remount(e)
		if !ok {
			continue
		}
		if r.already {
			return false, nil
		}
		if err := unix.Mount("", r.target, "", unix.MS_REMOUNT|r.flags, r.data); err != nil {
			return false, fmt.Errorf("cgroup favordynmods: remount %s with %q: %w", r.target, r.data, err)
		}
		return true, nil
	}
	return false, nil
}

// remount is how to remount a cgroup2 mount with favordynmods.
type remount struct {
	target  string
	flags   uintptr // the mount's own flags, which a remount replaces
	data    string  // its superblock options plus favordynmods, which a remount replaces too
	already bool    // favordynmods is on
}

// mountFlags are the per-mount options a remount must repeat to keep.
var mountFlags = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
}

// parseCgroup2 reads one /proc/self/mountinfo line; ok is false unless it
// is a cgroup2 mount.
func parseCgroup2(line string) (remount, bool) {
	e, ok := mountinfo.ParseLine(line)
	if !ok {
		return remount{}, false
	}
	return cgroup2Remount(e)
}

// cgroup2Remount is how to remount e with favordynmods; ok is false unless
// it is a cgroup2 mount. cgroup2's reconfigure sets every root flag from
// the options it is given (nsdelegate, memory_recursiveprot, ... left out
// are switched off), so the superblock options are all passed again.
func cgroup2Remount(e mountinfo.Entry) (remount, bool) {
	if e.FSType != "cgroup2" {
		return remount{}, false
	}
	r := remount{target: e.MountPoint}
	for _, o := range e.Options {
		r.flags |= mountFlags[o]
	}
	var data []string
	for _, o := range e.SuperOptions {
		switch o {
		case "rw", "ro", "":
		case "favordynmods":
			r.already = true
		default:
			data = append(data, o)
		}
	}
	r.data = strings.Join(append(data, "favordynmods"), ",")
	return r, true
}

// TuneHost turns on favordynmods on the host's cgroup2 mount (the unified
// tree, or /sys/fs/cgroup/unified on a hybrid host) for a runtime
// backend's constructor, once per process, and logs a change or a
// failure. A failure (an older kernel answers EINVAL) is not fatal:
// creates are slower, nothing else. A v1-only host has no cgroup2 mount:
// nothing to do.
func TuneHost(ctx context.Context, log *slog.Logger) {
	tuneOnce.Do(func() {
		changed, err := favorDynMods("/proc/self/mountinfo")
		switch {
		case err != nil:
			log.WarnContext(ctx, "cgroup2 favordynmods not set: each move of a process into a sandbox's cgroup waits for an RCU grace period", "err", err)
		case changed:
			log.InfoContext(ctx, "cgroup2 remounted with favordynmods: moving a process into a sandbox's cgroup no longer waits for an RCU grace period (forks and exits use a shared counter instead)")
		}
	})
}

var tuneOnce sync.Once

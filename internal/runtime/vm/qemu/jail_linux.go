package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/runtime/vm/image"
)

// JailConfig is the jail of m's QEMU running as ids' root in the network
// namespace nsPath.
func JailConfig(qemu, nsPath string, m *Machine, ids idmap.Range) (*jail.Config, error) {
	dir := filepath.Dir(m.QMP)
	mounts := []jail.Mount{{Path: dir, Writable: true}, {Path: m.Kernel}, {Path: m.Initramfs},
		{Path: "/dev/net/tun", Writable: true, Device: true}}
	chain, err := image.BackingChain(m.Disk)
	if err != nil {
		return nil, err
	}
	for _, p := range chain {
		mounts = append(mounts, jail.Mount{Path: p})
	}
	if err := readableByAll(append(chain, m.Kernel, m.Initramfs)...); err != nil {
		return nil, err
	}
	var groups []int
	if m.Accel == "kvm" {
		mounts = append(mounts, jail.Mount{Path: "/dev/kvm", Writable: true, Device: true})
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/kvm", &st); err == nil {
			groups = append(groups, int(st.Gid))
		}
	}
	return &jail.Config{UID: ids.Root(), GID: ids.Root(), Groups: groups, NetNS: nsPath, Mounts: mounts,
		Dir: dir, Path: qemu, Args: m.Args(), Env: []string{"PATH=/usr/bin:/bin"}}, nil
}

// readableByAll makes Moat's shared read-only files (kernel, initramfs,
// template disks) readable for every QEMU user, whatever umask wrote them;
// the data dir's own permissions keep host users out.
func readableByAll(paths ...string) error {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("jail: %w", err)
		}
		if fi.Mode().Perm()&0o004 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o444); err != nil {
				return fmt.Errorf("jail: %w", err)
			}
		}
	}
	return nil
}

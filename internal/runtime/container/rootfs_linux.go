package container

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
)

// mountRootfs mounts the template's idmapped view on <dir>/lower and, on
// <dir>/rootfs, an overlay of it (read-only lower layer) with the sandbox's
// upper and work dirs in <dir>/disk.
func mountRootfs(template, dir string, ids idmap.Range) error {
	lower := filepath.Join(dir, "lower")
	if err := idmap.Mount(template, lower, ids); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
		lower, filepath.Join(dir, "disk", "upper"), filepath.Join(dir, "disk", "work"))
	if err := unix.Mount("overlay", filepath.Join(dir, "rootfs"), "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay %s: %w", opts, err)
	}
	return nil
}

// mounts are the mount points in a sandbox dir, in unmount order; disk is
// a plain directory when the sandbox has no disk quota.
var mounts = []string{"rootfs", "lower", "sys", "log", "disk"}

// logCap bounds envd's stdout/stderr: the log is the only file on a tmpfs of
// this size on <dir>/log (see mountLog).
const logCap = 1 << 20

// logName is envd's stdout/stderr (and the OCI runtime's) on the log mount.
const logName = "envd.log"

// mountLog mounts a tmpfs of logCap bytes on <dir>/log for envd's output.
// The sandbox holds that file open and its root can take the descriptor
// (pidfd_getfd, /proc/1/fd/2), so it must lead nowhere on the host: writes
// stop with ENOSPC at the cap, the pages are charged to the memory cgroup of
// the writer (the sandbox's), the directory is not in the sandbox's view, and
// the mount lives as long as the sandbox dir, across `moat serve` restarts.
func mountLog(dir string) error {
	target := filepath.Join(dir, "log")
	opts := fmt.Sprintf("size=%d,nr_inodes=16,mode=0700", logCap)
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount log tmpfs on %s: %w", target, err)
	}
	return nil
}

// unmountRootfs unmounts every one of mounts in <dir>.
func unmountRootfs(dir string) error {
	for _, m := range mounts {
		if err := unmount(filepath.Join(dir, m)); err != nil {
			return err
		}
	}
	return nil
}

// mountSysfs mounts, read-only on target, a sysfs of the network namespace
// at nsPath (its /sys/class/net lists only that namespace's devices).
func mountSysfs(nsPath, target string) error {
	err := netpolicy.InNetns(nsPath, func() error {
		return unix.Mount("sysfs", target, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	})
	if err != nil {
		return fmt.Errorf("mount sysfs on %s: %w", target, err)
	}
	return nil
}

// unmount unmounts p, lazily when busy; not mounted is fine.
func unmount(p string) error {
	for i := 0; i < 3; i++ {
		err := unix.Unmount(p, 0)
		switch {
		case err == nil:
			continue // stacked mounts: unmount until EINVAL
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			time.Sleep(10 * time.Millisecond)
			if i == 2 {
				if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("lazy unmount %s: %w", p, err)
				}
				return nil
			}
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// removeDir deletes the sandbox directory, refusing while one of mounts
// is still a mount point (RemoveAll would otherwise walk into the template).
func removeDir(dir string) error {
	for _, m := range mounts {
		if mounted, _ := isMountPoint(filepath.Join(dir, m)); mounted {
			return fmt.Errorf("remove %s: %s still mounted", dir, m)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether p is a mount point in /proc/self/mountinfo.
func isMountPoint(p string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == p {
			return true, nil
		}
	}
	return false, sc.Err()
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// writeEtc puts /etc/hosts, /etc/hostname and /etc/resolv.conf in the upper
// dir, owned by the sandbox's root.
func writeEtc(upper string, spec runtime.Spec, addr netip.Addr, ids idmap.Range) error {
	hostname := spec.Hostname
	if hostname == "" {
		hostname = "sandbox"
	}
	etc := filepath.Join(upper, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := os.Chown(etc, ids.Root(), ids.Root()); err != nil {
		return err
	}
	files := map[string]string{
		"hosts":       fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", addr, hostname),
		"hostname":    hostname + "\n",
		"resolv.conf": resolvConf(),
	}
	for name, content := range files {
		p := filepath.Join(etc, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
		if err := os.Chown(p, ids.Root(), ids.Root()); err != nil {
			return err
		}
	}
	return nil
}

// resolvConf uses the host's public nameservers; private, loopback and
// link-local ones, and those inside the host's own networks (its LAN, its
// gateways: see netpolicy.HostNetworks), are unreachable from a sandbox, so
// public resolvers replace them.
func resolvConf() string {
	var ns []string
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && a.IsGlobalUnicast() && !a.IsPrivate() &&
					!netpolicy.IsHostNetwork(a) {
					ns = append(ns, a.String())
				}
			}
		}
	}
	if len(ns) == 0 {
		ns = []string{"1.1.1.1", "8.8.8.8"}
	}
	var b strings.Builder
	for _, a := range ns {
		b.WriteString("nameserver " + a + "\n")
	}
	return b.String()
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readTail returns up to n bytes from the end of a file.
func readTail(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	return string(bytes.TrimSpace(b)), err
}

package guestinit

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Main runs the guest init and never returns: on a fatal error it logs to the
// console and powers the machine off (QEMU runs with -no-reboot). Run as
// another process than PID 1 with a command (MountVolumesCmd), it does that
// and exits.
func Main() {
	if os.Getpid() != 1 && len(os.Args) > 1 && os.Args[1] == MountVolumesCmd {
		if err := MountVolumes(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "moat-vminit:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := boot(); err != nil {
		fmt.Fprintln(os.Stderr, "moat-vminit:", err)
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		select {}
	}
	go watchRestores()
	go watchResizes(cmdline()[ArgRoot])
	limitUserTasks()
	superviseEnvd(cmdline()[ArgEnvd])
}

func boot() error {
	if err := mountEarly(); err != nil {
		return err
	}
	args := cmdline()
	if args[ArgProbe] == "1" {
		fmt.Println(ProbeMarker)
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}
	if err := loadModules(ModulesOrder); err != nil {
		return err
	}
	if err := switchRoot(args[ArgRoot]); err != nil {
		return err
	}
	if err := mountLate(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(args[ArgHostname])); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	writeEtc(args[ArgHostname])
	if err := network(args[ArgAddr], args[ArgGateway]); err != nil {
		return err
	}
	if args[ArgAddr6] != "" {
		// Not fatal: a guest without IPv6 still works over IPv4.
		if err := network6(args[ArgAddr6], args[ArgGateway6]); err != nil {
			fmt.Fprintln(os.Stderr, "moat-vminit: IPv6:", err)
		}
	}
	return nil
}

// cmdline reads the moat.* keys of /proc/cmdline, with defaults.
func cmdline() map[string]string {
	m := map[string]string{ArgRoot: "/dev/vda", ArgAddr: "169.254.100.2/30", ArgGateway: "169.254.100.1",
		ArgHostname: "sandbox", ArgEnvd: "/usr/local/bin/envd"}
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "moat.") {
			m[k] = v
		}
	}
	return m
}

func mountEarly() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	return nil
}

// loadModules loads every module listed in order with finit_module.
func loadModules(order string) error {
	f, err := os.Open(order)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" {
			continue
		}
		mf, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("module: %w", err)
		}
		err = unix.FinitModule(int(mf.Fd()), "", 0)
		mf.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", p, err)
		}
	}
	return sc.Err()
}

// switchRoot mounts dev at /newroot, frees the initramfs' modules, moves the
// early mounts and chroots into it.
func switchRoot(dev string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dev); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("root device %s did not appear", dev)
		}
		time.Sleep(5 * time.Millisecond)
	}
	const nr = "/newroot"
	_ = os.MkdirAll(nr, 0o755)
	if err := unix.Mount(dev, nr, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s: %w", dev, err)
	}
	_ = os.RemoveAll("/lib") // the modules are loaded; give the memory back
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		_ = os.MkdirAll(nr+d, 0o755)
		if err := unix.Mount(d, nr+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", d, err)
		}
	}
	if err := unix.Chdir(nr); err != nil {
		return err
	}
	if err := unix.Mount(nr, "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

func mountLate() error {
	for _, m := range []struct{ src, dst, fs, data string }{
		{"devpts", "/dev/pts", "devpts", "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"shm", "/dev/shm", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID|unix.MS_NOEXEC, m.data); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	if _, err := os.Lstat("/dev/ptmx"); err == nil {
		_ = os.Remove("/dev/ptmx")
	}
	_ = os.Symlink("pts/ptmx", "/dev/ptmx")
	return nil
}

// writeEtc sets the identity files; best effort (the root may be read-only).
func writeEtc(hostname string) {
	files := map[string]string{
		"/etc/hostname":    hostname + "\n",
		"/etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n",
		"/etc/resolv.conf": "nameserver 1.1.1.1\nnameserver 8.8.8.8\n",
	}
	for p, c := range files {
		_ = os.Remove(p) // it may be a dangling symlink
		_ = os.WriteFile(p, []byte(c), 0o644)
	}
}

// network6 gives the (raised) eth0 the IPv6 address addr, usable at once
// (no duplicate address detection: the link holds the guest and its
// gateway only), and a default route via gw; eth0 ignores router
// advertisements.
func network6(addr, gw string) error {
	eth, err := netlink.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0: %w", err)
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/eth0/accept_ra", []byte("0"), 0o644)
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	a.Flags |= unix.IFA_F_NODAD
	if err := netlink.AddrAdd(eth, a); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	ip := net.ParseIP(gw)
	if ip == nil {
		return fmt.Errorf("gateway %q: not an address", gw)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: ip}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// network raises lo and eth0 with addr and a default route via gw.
func network(addr, gw string) error {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	var eth netlink.Link
	for i := 0; i < 200; i++ {
		if eth, err = netlink.LinkByName("eth0"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("eth0: %w", err)
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if err := netlink.AddrAdd(eth, a); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return fmt.Errorf("eth0 up: %w", err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// superviseEnvd starts envd, restarts it when it exits, and reaps every
// other child (orphans are reparented to PID 1).
func superviseEnvd(path string) {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	for {
		cmd := exec.Command(path)
		cmd.Env = env
		cmd.Dir = "/"
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "moat-vminit: start envd:", err)
			time.Sleep(time.Second)
			continue
		}
		reapUntil(cmd.Process.Pid)
		fmt.Fprintln(os.Stderr, "moat-vminit: envd exited, restarting")
		if time.Since(start) < time.Second {
			time.Sleep(time.Second)
		}
	}
}

// reapUntil waits for any child until pid has exited.
func reapUntil(pid int) {
	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || p == pid {
			return
		}
	}
}

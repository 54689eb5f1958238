package container

import (
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
)

// envdPort is where envd listens inside every sandbox.
const envdPort = 49983

// defaultCaps is Docker's default capability set. CAP_SYS_ADMIN, CAP_NET_ADMIN,
// CAP_SYS_PTRACE, CAP_SYS_TIME and the rest are never granted.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW",
	"CAP_SYS_CHROOT", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
}

// deniedSyscalls fail with EPERM. The seccomp default is allow (like Docker's
// profile in spirit, as a denylist): everything that changes mounts or
// namespaces, loads kernel code, reaches kernel keyrings, traces other
// processes or touches host-global state. clock_settime stays allowed (envd
// calls it in VMs; here it fails anyway without CAP_SYS_TIME).
var deniedSyscalls = []string{
	"mount", "umount2", "pivot_root", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "iopl", "ioperm",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl", "syslog",
	"uselib", "ustat", "sysfs", "_sysctl", "vhangup", "nfsservctl",
	// io_uring: a large kernel attack surface with a history of privilege
	// escalations; Docker's default profile blocks it too.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// nsCloneFlags may not be passed to clone: no new namespaces inside a sandbox.
var nsCloneFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
	unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP,
}

func seccompProfile() *specs.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		// Only x86_64: a filter with one architecture makes libseccomp kill
		// callers of other ABIs (i386 int 0x80, x32), so they cannot bypass it.
		Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls: []specs.LinuxSyscall{
			{Names: deniedSyscalls, Action: specs.ActErrno, ErrnoRet: &eperm},
			// clone3 passes flags in memory seccomp cannot read: ENOSYS makes
			// libc and Go fall back to clone, whose flags are checked below.
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
		},
	}
	for _, f := range nsCloneFlags {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{
			Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: &eperm,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: f, ValueTwo: f, Op: specs.OpMaskedEqual}},
		})
	}
	return s
}

// ociSpec builds the bundle config for a sandbox.
//
// Choices worth knowing:
//   - A user namespace maps IDs 0..65535 inside to the sandbox's own host
//     range (ids, see package idmap): root inside is an unprivileged ID
//     outside, unlike any other sandbox's. The capabilities below are
//     capabilities in that namespace only; the network namespace belongs to
//     the host's, so no network configuration is possible inside.
//   - NoNewPrivileges is true: setuid binaries (sudo, su) inside cannot gain
//     privileges. envd starts processes as any user itself, so the SDK's
//     "user" and "root" users both work without sudo.
//   - /sys is a bind of sysDir, a sysfs mounted from the sandbox's netns on
//     the host (hostfs.MountSysfs): a sysfs mount inside needs a netns the user
//     namespace owns, and a bind of the host's /sys would show the host's
//     network devices.
func ociSpec(s runtime.Spec, nsPath, cgroupsPath, sysDir string, ids idmap.Range) *specs.Spec {
	hostname := s.Hostname
	if hostname == "" {
		hostname = "sandbox"
	}
	caps := append([]string(nil), defaultCaps...)
	return &specs.Spec{
		Version:  ociVersion,
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: hostname,
		Process: &specs.Process{
			Args: []string{"/usr/local/bin/envd", "--port", "49983"},
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME=/root",
				"MOAT_SANDBOX_ID=" + s.ID,
				"MOAT_TEMPLATE_ID=" + s.TemplateID,
			},
			Cwd:  "/",
			User: specs.User{UID: 0, GID: 0},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         rlimits(s.Pids),
			NoNewPrivileges: true,
		},
		Mounts: defaultMounts(sysDir),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.MountNamespace}, {Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.CgroupNamespace}, {Type: specs.UserNamespace},
				{Type: specs.NetworkNamespace, Path: nsPath},
			},
			UIDMappings: ids.Mappings(),
			GIDMappings: ids.Mappings(),
			CgroupsPath: cgroupsPath,
			Resources:   resources(s),
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/sys/firmware", "/sys/devices/virtual/powercap",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
			Seccomp: seccompProfile(),
		},
	}
}

// defaultMounts are a sandbox's kernel filesystems; /sys is a bind of
// sysDir, or a plain sysfs when sysDir is empty (no user namespace).
func defaultMounts(sysDir string) []specs.Mount {
	sys := specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}
	if sysDir != "" {
		sys = specs.Mount{Destination: "/sys", Type: "bind", Source: sysDir, Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		sys,
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
}

func resources(s runtime.Spec) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}, // runtimes add the standard allow list
	}
	if s.MemoryMiB > 0 {
		b := int64(s.MemoryMiB) << 20
		swap := b // memory+swap = memory: no swap
		r.Memory = &specs.LinuxMemory{Limit: &b, Swap: &swap}
	}
	if s.Pids > 0 {
		p := int64(s.Pids)
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if s.VCPUs > 0 {
		period := uint64(100000)
		quota := int64(s.VCPUs) * 100000
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	return r
}

// ociVersion is the spec version written to config.json: crun 1.8 rejects
// versions newer than it knows (the Go types are v1.3.0; the fields we use exist in 1.0.2).
const ociVersion = "1.0.2"

// rlimits are the sandbox's resource limits: RLIMIT_NOFILE, and
// RLIMIT_NPROC a reserve below the cgroup's pids limit. The kernel counts
// RLIMIT_NPROC per user inside the sandbox's own user namespace, and
// envd's children inherit it, so a fork bomb run as any account other
// than envd's (root) stops short of the pids limit and leaves envd the
// threads the Go runtime needs: a Go program that cannot start a thread
// dies ("fatal error: newosproc"), and with envd the sandbox. A bomb run
// as root shares envd's count and can still take its own sandbox down
// (docs/threat-model.md).
func rlimits(pids int) []specs.POSIXRlimit {
	r := nofile()
	if pids > 0 {
		n := uint64(pids - envdPidsReserve(pids))
		r = append(r, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: n, Soft: n})
	}
	return r
}

// envdPidsReserve is how many of a sandbox's pids RLIMIT_NPROC keeps
// for envd: an eighth, at least 32 (envd runs ~10 threads idle and one
// per concurrent blocking call), never the whole limit.
func envdPidsReserve(pids int) int {
	r := max(pids/8, 32)
	return min(r, pids/2)
}

// nofile is RLIMIT_NOFILE for the sandbox: 65536, capped at our own hard
// limit, which a host without CAP_SYS_RESOURCE cannot raise.
func nofile() []specs.POSIXRlimit {
	n := uint64(1 << 16)
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &cur); err == nil && cur.Max < n {
		n = cur.Max
	}
	return []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: n, Soft: n}}
}

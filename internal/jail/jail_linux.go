// Package jail runs a program as an unprivileged host user, without any
// capability, in a mount namespace of its own that shows only the paths it
// is given, Firecracker-jailer style. Moat uses it for QEMU: a device
// emulation bug then yields an unprivileged user that sees its own
// sandbox's files and nothing else of the host's data. Its second kind,
// the user-namespace jail (NSCommand, EnterNS in userns_linux.go), is for
// the NFS server of a microVM's volumes, which must act as every user of
// the sandbox's ID range on the volume's files.
//
// Command re-executes the running binary (/proc/self/exe) with argv[0]
// set to HelperName, in a new mount namespace; this package's init
// recognises that and, instead of running the binary's main, builds the
// jail and execs the program. Any binary that links this package (moat,
// test binaries) can therefore start jails.
//
// What the program sees: a read-only tmpfs root holding /usr, the
// /bin, /sbin and /lib* directories or symlinks of the host (read-only),
// /etc/ld.so.cache, a /dev with null, zero, random and urandom, and the
// Config's mounts at their host paths. No /proc, /sys, /etc beyond that,
// /home, /root or /tmp.
package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// HelperName is argv[0] of the re-executed helper.
const HelperName = "moat-jail"

// configEnv carries the Config (JSON) to the helper.
const configEnv = "MOAT_JAIL_CONFIG"

// Mount is a host path shown inside the jail at the same path.
type Mount struct {
	Path     string `json:"path"`
	Writable bool   `json:"writable,omitempty"`
	Device   bool   `json:"device,omitempty"` // a device node: nodev is not set
	Exec     bool   `json:"exec,omitempty"`   // noexec is not set
}

// Config describes one jailed program.
type Config struct {
	UID    int      `json:"uid"` // must not be 0
	GID    int      `json:"gid"` // must not be 0
	Groups []int    `json:"groups,omitempty"`
	NetNS  string   `json:"netns,omitempty"` // network namespace file to enter ("": the caller's)
	Mounts []Mount  `json:"mounts"`
	Dir    string   `json:"dir"`  // working directory (inside a mount)
	Path   string   `json:"path"` // program: an absolute path visible in the jail
	Args   []string `json:"args"` // argv[1:]
	Env    []string `json:"env"`  // the program's whole environment
}

// Command returns a command that runs cfg's program jailed. The PID of the
// started command is the program's (the helper execs it). The caller sets
// Stdin, Stdout and Stderr; no other descriptor reaches the program
// (ExtraFiles are not supported).
func Command(cfg *Config) (*exec.Cmd, error) {
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return nil, fmt.Errorf("jail: refusing uid %d gid %d", cfg.UID, cfg.GID)
	}
	if !filepath.IsAbs(cfg.Path) {
		return nil, fmt.Errorf("jail: program path %q is not absolute", cfg.Path)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{HelperName}, Env: []string{configEnv + "=" + string(b)}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Setpgid: true}
	return cmd, nil
}

func init() {
	if len(os.Args) == 0 || os.Args[0] != HelperName || os.Getenv(configEnv) == "" {
		return
	}
	err := helper()
	fmt.Fprintf(os.Stderr, "moat-jail: %v\n", err)
	os.Exit(125)
}

// helper runs in the re-executed process: it builds the jail and execs the
// program; it returns only on failure.
func helper() error {
	// Namespaces, the bounding set and no_new_privs are per thread: all of
	// it happens on this thread, which then execs.
	goruntime.LockOSThread()
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return fmt.Errorf("refusing uid %d gid %d", cfg.UID, cfg.GID)
	}
	if cfg.NetNS != "" {
		if err := enterNetns(cfg.NetNS); err != nil {
			return err
		}
	}
	if err := buildRoot(&cfg); err != nil {
		return err
	}
	if err := dropPrivileges(&cfg); err != nil {
		return err
	}
	if err := unix.Chdir(cfg.Dir); err != nil {
		return fmt.Errorf("chdir %s: %w", cfg.Dir, err)
	}
	// Go creates its descriptors close-on-exec, but the server may have
	// inherited others from its parent: only 0, 1 and 2 reach the program.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close descriptors: %w", err)
	}
	argv := append([]string{cfg.Path}, cfg.Args...)
	if err := unix.Exec(cfg.Path, argv, cfg.Env); err != nil {
		return fmt.Errorf("exec %s: %w", cfg.Path, err)
	}
	return errors.New("exec returned")
}

func enterNetns(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	return nil
}

// systemMounts are what a dynamically linked program needs: /usr, the
// host's top-level binary and library directories (symlinks into /usr on
// merged-/usr systems), the loader cache and a minimal /dev.
func systemMounts() []Mount {
	ms := []Mount{{Path: "/usr", Exec: true}}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			ms = append(ms, Mount{Path: p, Exec: true})
		}
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		ms = append(ms, Mount{Path: "/etc/ld.so.cache"})
	}
	for _, d := range []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"} {
		ms = append(ms, Mount{Path: d, Writable: true, Device: true})
	}
	return ms
}

// sortMounts orders mounts parents first and drops duplicates.
func sortMounts(ms []Mount) []Mount {
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Path < ms[j].Path })
	out := ms[:0]
	for i, m := range ms {
		if i > 0 && m.Path == out[len(out)-1].Path {
			continue
		}
		out = append(out, m)
	}
	return out
}

package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A user-namespace jail (NSCommand, EnterNS) is for a program that must
// act as many users on files of a sandbox's ID range, as Moat's NFS
// server does for a microVM's volumes: it runs as root of a user
// namespace whose 65536 IDs are the sandbox's host range (so nothing it
// is or does is privileged on the host), in new mount, network, PID, IPC
// and UTS namespaces. Its mount namespace ends up holding a read-only
// tmpfs root and the detached mounts it was given (an idmapped volume
// mount, see idmap.OpenTree), nothing of the host's tree; its network
// namespace is empty (it serves on a socket it was given); it sees no
// other process. Before it does anything else it drops every capability
// but the ones it names (in its own user namespace), on all of its
// threads, and sets no_new_privs and non-dumpable.
//
// The program is a separate static binary (CGO_ENABLED=0): only then can
// it change the capabilities of every thread of the Go runtime at once
// (syscall.AllThreadsSyscall), and only a fresh exec starts it inside
// the new user namespace. It is executed from a descriptor root opened
// (/proc/self/fd/N in the child), so it may live where the sandbox's IDs
// cannot look (Moat's data dir, a build tree).

// nsEnv carries the jail's part of the child's setup.
const nsEnv = "MOAT_JAIL_NS"

// NSMount is a detached mount tree (an open_tree descriptor) attached at
// Dir, an absolute path in the jail.
type NSMount struct {
	Dir  string
	File *os.File
}

// NSConfig describes a program jailed in namespaces of its own.
type NSConfig struct {
	Host   uint32    // first host ID of the range mapped to 0..65535
	Mounts []NSMount // attached in order
	Files  []*os.File
	Keep   []int // capabilities kept (in the user namespace)
	// Program is the static program, opened by the caller (the caller
	// closes it once the command started); its mode must let others
	// execute it.
	Program *os.File
	Args    []string // argv (argv[0] included)
	Env     []string // the program's environment
}

// nsSetup is what EnterNS reads.
type nsSetup struct {
	Dirs  []string `json:"dirs"`
	Files int      `json:"files"`
	Keep  []int    `json:"keep"`
}

// The descriptors the child gets: 3.. the mounts, then NSConfig.Files,
// then the program (closed by EnterNS).

// NSCommand returns a command that starts cfg's program in its
// namespaces; the program calls EnterNS first. The caller sets Stdout and
// Stderr and may close cfg's files once it started.
func NSCommand(cfg *NSConfig) (*exec.Cmd, error) {
	if cfg.Host == 0 {
		return nil, errors.New("jail: refusing to map host root")
	}
	if cfg.Program == nil || len(cfg.Args) == 0 {
		return nil, errors.New("jail: no program or no argv")
	}
	setup := nsSetup{Files: len(cfg.Files), Keep: cfg.Keep}
	var files []*os.File
	for _, m := range cfg.Mounts {
		if !filepath.IsAbs(m.Dir) || filepath.Clean(m.Dir) != m.Dir || m.Dir == "/" {
			return nil, fmt.Errorf("jail: mount dir %q", m.Dir)
		}
		setup.Dirs = append(setup.Dirs, m.Dir)
		files = append(files, m.File)
	}
	b, err := json.Marshal(setup)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(cfg.Host), Size: 1 << 16}}
	files = append(files, cfg.Files...)
	prog := "/proc/self/fd/" + strconv.Itoa(3+len(files))
	cmd := &exec.Cmd{Path: prog, Args: cfg.Args, Env: append([]string{nsEnv + "=" + string(b)}, cfg.Env...),
		ExtraFiles: append(files, cfg.Program)}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true, Setpgid: true,
		// The child keeps host root's IDs (unmapped in its namespace) until
		// it sets them: root of the namespace, host IDs Host:Host.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
	}
	return cmd, nil
}

// EnterNS finishes the jail of a program NSCommand started: it attaches
// the mounts under a fresh tmpfs, pivots into it, detaches the host's
// tree, makes the root read-only, drops every capability not kept on all
// threads and sets no_new_privs and non-dumpable. It returns the
// NSConfig's Files (descriptors 3+len(Mounts) on).
func EnterNS() ([]*os.File, error) {
	var s nsSetup
	if err := json.Unmarshal([]byte(os.Getenv(nsEnv)), &s); err != nil {
		return nil, fmt.Errorf("jail: setup: %w", err)
	}
	os.Unsetenv(nsEnv)
	unix.Close(3 + len(s.Dirs) + s.Files) // the program's own descriptor
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", rootDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return nil, fmt.Errorf("root tmpfs: %w", err)
	}
	for i, dir := range s.Dirs {
		fd := 3 + i
		if err := os.MkdirAll(rootDir+dir, 0o755); err != nil {
			return nil, fmt.Errorf("mount point %s: %w", dir, err)
		}
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, rootDir+dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("attach %s: %w", dir, err)
		}
		unix.Close(fd)
	}
	if err := pivot(); err != nil {
		return nil, err
	}
	if err := dropAllThreads(s.Keep); err != nil {
		return nil, err
	}
	var files []*os.File
	for i := range s.Files {
		fd := 3 + len(s.Dirs) + i
		files = append(files, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
	}
	return files, nil
}

// dropAllThreads leaves every thread of the process with exactly the
// capabilities keep (permitted, effective; bounding set the same; no
// inheritable or ambient ones) and no_new_privs, and makes the process
// non-dumpable (nobody else of its user may ptrace it or read its
// memory).
func dropAllThreads(keep []int) error {
	kept := map[int]bool{}
	var mask uint64
	for _, c := range keep {
		kept[c] = true
		mask |= 1 << uint(c)
	}
	for c := 0; c < 64; c++ {
		if kept[c] {
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 {
			if e == unix.EINVAL {
				break // past the last capability
			}
			return fmt.Errorf("drop capability %d: %w (a static binary, CGO_ENABLED=0, is required)", c, e)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); e != 0 {
		return fmt.Errorf("clear ambient capabilities: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(mask), Permitted: uint32(mask)},
		{Effective: uint32(mask >> 32), Permitted: uint32(mask >> 32)},
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("set capabilities: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return fmt.Errorf("no_new_privs: %w", e)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("non-dumpable: %w", err)
	}
	return nil
}

package container

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/hostfs"
	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/testkit"
)

// TestSandboxDescriptors lists, from the host, every descriptor of every
// process of a sandbox: each must lead into the sandbox (its rootfs, disk or
// log tmpfs), to /dev/null or a harmless character device, or to an
// anonymous object (pipe, socket, eventfd, …) — never to a file on a host
// filesystem outside the sandbox dir's own mounts.
func TestSandboxDescriptors(t *testing.T) {
	r := newTestRuntime(t, "")
	for _, tc := range []struct {
		name string
		disk int
	}{{"own disk", 32}, {"no disk quota", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			h := create(t, r, runtime.Spec{DiskMiB: tc.disk})
			// One more process, started the way a user's would be.
			if err := r.oci.RunCmd(r.oci.Command(context.Background(), "exec", "-d", r.containerName(h.ID), "sleep", "600")); err != nil {
				t.Fatalf("exec -d: %v", err)
			}
			hostDevs := hostDevices(t, r.dir(h.ID))
			pids := sandboxPIDs(t, h.PID)
			if len(pids) < 2 {
				t.Fatalf("processes of the sandbox: %v", pids)
			}
			n := 0
			for _, pid := range pids {
				for fd, target := range descriptors(t, pid) {
					n++
					if why := hostLeak(target, hostDevs); why != "" {
						t.Errorf("pid %d fd %s → %s: %s", pid, fd, target.link, why)
					}
				}
				if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid)); pid == h.PID && link != "/dev/null" {
					t.Errorf("envd's stdin is %q, want /dev/null", link)
				}
			}
			if got := r.logPath(h.ID); !strings.HasPrefix(got, r.dir(h.ID)) {
				t.Fatalf("log %s outside the sandbox dir", got)
			}
			t.Logf("%d processes, %d descriptors checked", len(pids), n)
		})
	}
}

// fdTarget is what a descriptor leads to, seen from the host.
type fdTarget struct {
	link  string
	st    unix.Stat_t
	flags int // open flags from fdinfo
}

// descriptors returns pid's descriptors by number.
func descriptors(t *testing.T, pid int) map[string]fdTarget {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	out := map[string]fdTarget{}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		var ft fdTarget
		ft.link, _ = os.Readlink(p)
		if err := unix.Stat(p, &ft.st); err != nil {
			continue // closed meanwhile
		}
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				ft.flags = int(n)
			}
		}
		out[e.Name()] = ft
	}
	return out
}

// hostLeak says why target is a host object outside the sandbox, or "".
func hostLeak(target fdTarget, hostDevs map[uint64]string) string {
	switch target.st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		return "" // anonymous pipes and sockets (a named FIFO would be on a host dev: checked below)
	case unix.S_IFCHR:
		maj, minor := unix.Major(target.st.Rdev), unix.Minor(target.st.Rdev)
		switch {
		case maj == 1 && (minor == 3 || minor == 5 || minor == 7 || minor == 8 || minor == 9): // null zero full random urandom
		case maj == 5 && (minor == 0 || minor == 2), maj >= 136 && maj <= 143: // tty, ptmx, pts
		default:
			return fmt.Sprintf("character device %d:%d", maj, minor)
		}
		return ""
	}
	if strings.HasPrefix(target.link, "anon_inode:") {
		return ""
	}
	if m, ok := hostDevs[target.st.Dev]; ok {
		// envd reads its own CPU quota from the cgroup namespace's
		// read-only mount: a read-only descriptor to its own cgroup.
		if strings.HasPrefix(m, "/sys/fs/cgroup") && target.flags&unix.O_ACCMODE == unix.O_RDONLY {
			return ""
		}
		return "a file on the host filesystem mounted on " + m
	}
	return ""
}

// hostDevices maps the device of every mount of the host (this process's
// mount namespace) to its mount point, except mounts inside sandboxDir.
func hostDevices(t *testing.T, sandboxDir string) map[uint64]string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	devs := map[uint64]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		mp := mountinfo.Unescape(fields[4])
		if mp == sandboxDir || strings.HasPrefix(mp, sandboxDir+"/") {
			continue
		}
		var maj, minor uint32
		if _, err := fmt.Sscanf(fields[2], "%d:%d", &maj, &minor); err == nil {
			devs[unix.Mkdev(maj, minor)] = mp
		}
	}
	return devs
}

// sandboxPIDs returns the host PIDs of the processes in init's PID namespace.
func sandboxPIDs(t *testing.T, initPID int) []int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); got == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// baseTemplateRootfs is the CI base template (python3 and the real envd),
// built by scripts/setup.sh into testkit.DataDir().
func baseTemplateRootfs(t *testing.T) string {
	t.Helper()
	p := testkit.RequireTemplate(t, "base")
	if _, err := os.Stat(filepath.Join(p, "usr/bin/python3")); err != nil {
		testkit.Missing(t, "no python3 in the base template at %s (scripts/setup.sh builds it): %v", p, err)
	}
	return p
}

// getfdScript, run as root inside a sandbox, takes every descriptor of every
// other process it sees with pidfd_getfd and writes up to 32 MiB into each
// regular file and pipe it gets. It skips itself: `exec` hands it the test's
// own stdio, which Moat never gives a sandbox process.
const getfdScript = `
import ctypes, json, os, stat, fcntl
libc = ctypes.CDLL(None, use_errno=True)
res = {"taken": 0, "denied": 0, "written": {}}
chunk = b"x" * (1 << 20)
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    pid = int(name)
    pidfd = libc.syscall(434, pid, 0)
    if pidfd < 0:
        continue
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        fds = [str(i) for i in range(64)]
    for fd in fds:
        nfd = libc.syscall(438, pidfd, int(fd), 0)
        if nfd < 0:
            res["denied"] += 1
            continue
        res["taken"] += 1
        mode = os.fstat(nfd).st_mode
        if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
            fl = fcntl.fcntl(nfd, fcntl.F_GETFL)
            fcntl.fcntl(nfd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
            n = 0
            try:
                for _ in range(32):
                    n += os.write(nfd, chunk)
            except OSError:
                pass
            res["written"]["%d/%s %s" % (pid, fd, os.readlink("/proc/%d/fd/%s" % (pid, fd)))] = n
        os.close(nfd)
    os.close(pidfd)
print(json.dumps(res))
`

// TestPidfdGetfdCannotReachHost: root inside a sandbox takes every
// descriptor it can with pidfd_getfd and writes into it; no file of the
// sandbox dir outside its own mounts grows, and everything it managed to
// write went into envd's capped log. The script counts every byte it
// writes, so bounding that count bounds what the host's disk can lose; a
// statfs before and after is not used because other test packages write
// to the same disk at the same time.
func TestPidfdGetfdCannotReachHost(t *testing.T) {
	r := newTestRuntime(t, "")
	rootfs := baseTemplateRootfs(t)
	id := newID()
	h, err := r.Create(context.Background(), runtime.Spec{ID: id, RootfsDir: rootfs, DiskMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), id) })
	before := hostFiles(t, r.dir(id))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := ociOutput(r.oci, r.oci.Command(ctx, "exec", r.containerName(id), "python3", "-c", getfdScript))
	if err != nil {
		t.Fatalf("script: %v %s", err, out)
	}
	var res struct {
		Taken, Denied int
		Written       map[string]int
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	t.Logf("descriptors taken %d, denied %d; written: %v", res.Taken, res.Denied, res.Written)
	if res.Taken == 0 {
		t.Error("pidfd_getfd took no descriptor: the test did not exercise the attack")
	}
	for p, size := range hostFiles(t, r.dir(id)) {
		if size > before[p] {
			t.Errorf("host file %s grew from %d to %d bytes", p, before[p], size)
		}
	}
	total := 0
	for _, n := range res.Written {
		total += n
	}
	if total > hostfs.LogCap {
		t.Errorf("the attack wrote %d bytes through taken descriptors; only envd's log (cap %d) may take any", total, hostfs.LogCap)
	}
	if fi, err := os.Stat(r.logPath(id)); err != nil || fi.Size() > hostfs.LogCap {
		t.Errorf("envd log: %v %v (cap %d)", fi, err, hostfs.LogCap)
	}
	if code, _, err := get(h, "health", nil, 2*time.Second); err != nil || code != 204 {
		t.Errorf("envd after the attack: %d %v", code, err)
	}
}

// hostFiles maps every file in the sandbox dir that is on the host's
// filesystem (not below one of its mounts) to its size.
func hostFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	var root unix.Stat_t
	if err := unix.Stat(dir, &root); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Dev != root.Dev {
			return fs.SkipDir
		}
		out[p] = st.Blocks * 512
		if st.Size > out[p] {
			out[p] = st.Size
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEnvdLogCap floods envd's stdout/stderr from inside (the file
// description envd logs to, reached as /proc/1/fd/2): the log stops at its
// cap with ENOSPC, envd keeps serving, and the host's disk is untouched
// (the ENOSPC at the cap is the proof: the log is a tmpfs of its own).
func TestEnvdLogCap(t *testing.T) {
	r := newTestRuntime(t, "")
	h := create(t, r, runtime.Spec{})
	out, err := execIn(r, h.ID, "sh", "-c", "busybox dd if=/dev/zero of=/proc/1/fd/2 bs=65536 count=512 2>&1; true")
	if !strings.Contains(out, "No space left") {
		t.Errorf("64 MiB into envd's stderr: %v %s", err, out)
	}
	fi, err := os.Stat(r.logPath(h.ID))
	if err != nil || fi.Size() > hostfs.LogCap {
		t.Fatalf("envd log: %v %v, cap %d", fi, err, hostfs.LogCap)
	}
	t.Logf("envd log after the flood: %d bytes (cap %d)", fi.Size(), hostfs.LogCap)
	if code, _, err := get(h, "health", nil, 2*time.Second); err != nil || code != 204 {
		t.Errorf("envd after the flood: %d %v", code, err)
	}
}

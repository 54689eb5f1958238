package vm

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// procStatus reads /proc/<pid>/status as key → value.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		st[k] = strings.TrimSpace(v)
	}
	return st
}

// TestQEMUJailed checks two sandboxes' QEMUs: their own unprivileged IDs,
// no capabilities, no_new_privs, a private mount namespace showing only
// their own files, only the descriptors they need, and that neither their
// IDs nor their jails reach the data dir or the other sandbox.
func TestQEMUJailed(t *testing.T) {
	r := testRuntime(t)
	if r.launcher.NoJail {
		t.Skip("by design: this runtime runs QEMU without a jail (NoJail), there is none to check")
	}
	a, b := create(t, r), create(t, r)
	moatDB := filepath.Join(filepath.Dir(r.dir), "moat.db")
	if err := os.WriteFile(moatDB, []byte("secret"), 0o644); err != nil { // even world-readable
		t.Fatal(err)
	}
	defer os.Remove(moatDB)
	uids := map[string]bool{}
	for _, h := range []*runtime.Handle{a, b} {
		ids, err := idmap.Read(r.sandboxDir(h.ID))
		if err != nil {
			t.Fatal(err)
		}
		st := procStatus(t, h.PID)
		want := strconv.Itoa(ids.Root())
		for _, k := range []string{"Uid", "Gid"} {
			if st[k] != strings.Repeat(want+"\t", 3)+want {
				t.Errorf("%s: %s %q, want %s everywhere", h.ID, k, st[k], want)
			}
		}
		uids[st["Uid"]] = true
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if st[k] != "0000000000000000" {
				t.Errorf("%s: %s = %s", h.ID, k, st[k])
			}
		}
		if st["NoNewPrivs"] != "1" || st["Groups"] != "" {
			t.Errorf("%s: NoNewPrivs %q Groups %q", h.ID, st["NoNewPrivs"], st["Groups"])
		}
		other := b
		if h == b {
			other = a
		}
		checkMounts(t, r, h, other)
		checkFDs(t, r, h)
		checkCannotOpen(t, ids, []string{moatDB, filepath.Join(r.sandboxDir(other.ID), "mem"),
			filepath.Join(r.sandboxDir(other.ID), "disk.qcow2"), filepath.Join(r.sandboxDir(other.ID), "meta.json")})
		checkJailView(t, r, h, ids, []string{moatDB, filepath.Join(r.sandboxDir(other.ID), "mem"),
			filepath.Join(r.sandboxDir(h.ID), "meta.json"), filepath.Join(r.sandboxDir(h.ID), "idmap")})
	}
	if len(uids) != 2 {
		t.Errorf("the two QEMUs share their IDs: %v", uids)
	}
}

// checkMounts: h's QEMU has a mount namespace of its own, whose mounts are
// the system ones, its own directory and its boot and backing files.
func checkMounts(t *testing.T, r *Runtime, h, other *runtime.Handle) {
	t.Helper()
	pid := strconv.Itoa(h.PID)
	mine, _ := os.Readlink("/proc/" + pid + "/ns/mnt")
	host, _ := os.Readlink("/proc/self/ns/mnt")
	if mine == "" || mine == host {
		t.Errorf("%s: mount namespace %q, host's %q", h.ID, mine, host)
	}
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	dir := r.sandboxDir(h.ID)
	var mps []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		mp := f[4]
		mps = append(mps, mp+"("+f[5]+")")
		ok := mp == "/" || mp == "/usr" || mp == "/etc/ld.so.cache" || strings.HasPrefix(mp, "/dev/") ||
			mp == dir || strings.HasPrefix(mp, filepath.Join(r.dir, "kernel")+"/") || strings.HasPrefix(mp, filepath.Join(r.dir, "templates")+"/")
		if !ok || strings.Contains(mp, other.ID) {
			t.Errorf("%s: unexpected mount %s", h.ID, line)
		}
		if mp == "/" && !strings.Contains(line, " - tmpfs ") {
			t.Errorf("%s: root is not the jail's tmpfs: %s", h.ID, line)
		}
	}
	t.Logf("%s: mounts %s", h.ID, strings.Join(mps, " "))
}

// checkFDs: QEMU holds stdin (/dev/null), its log, and otherwise only
// what it opened itself: its own files, backing files, the tap, sockets
// and anonymous objects.
func checkFDs(t *testing.T, r *Runtime, h *runtime.Handle) {
	t.Helper()
	fdDir := "/proc/" + strconv.Itoa(h.PID) + "/fd"
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := r.sandboxDir(h.ID)
	var all []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue
		}
		all = append(all, e.Name()+"="+strings.TrimPrefix(target, dir+"/"))
		ok := strings.HasPrefix(target, dir+"/") || strings.HasPrefix(target, filepath.Join(r.dir, "templates")+"/") ||
			strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "anon_inode:") ||
			target == "/dev/null" || target == "/dev/net/tun" || target == "/dev/urandom" || target == "/dev/kvm"
		switch e.Name() {
		case "0":
			ok = target == "/dev/null"
		case "1", "2":
			ok = target == qemu.LogPath(dir)
		}
		if !ok {
			t.Errorf("%s: qemu fd %s -> %s", h.ID, e.Name(), target)
		}
	}
	t.Logf("%s: fds %s", h.ID, strings.Join(all, " "))
}

// checkCannotOpen: a process with the QEMU's IDs, on the host, cannot
// open any of paths.
func checkCannotOpen(t *testing.T, ids idmap.Range, paths []string) {
	t.Helper()
	for _, p := range paths {
		cmd := exec.Command("/usr/bin/head", "-c1", p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(ids.Root()), Gid: uint32(ids.Root()), Groups: []uint32{}}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("uid %d opened %s on the host: %q", ids.Root(), p, out)
		}
	}
}

// checkJailView: a process in h's jail (same IDs, mounts and namespace
// setup as its QEMU) reads its own memory file but none of paths.
func checkJailView(t *testing.T, r *Runtime, h *runtime.Handle, ids idmap.Range, paths []string) {
	t.Helper()
	meta, err := snapshot.ReadMeta(r.sandboxDir(h.ID))
	if err != nil {
		t.Fatal(err)
	}
	m, err := launch.RestoreMachine(h.ID, r.sandboxDir(h.ID), meta, r.tscKHz)
	if err != nil {
		t.Fatal(err)
	}
	jc, err := qemu.JailConfig(r.o.qemu, "", m, ids)
	if err != nil {
		t.Fatal(err)
	}
	try := func(p string) (string, error) {
		jc.Path, jc.Args = "/usr/bin/head", []string{"-c1", p}
		cmd, err := jail.Command(jc)
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := try(m.MemPath); err != nil {
		t.Errorf("jail of %s cannot read its own memory file: %v: %s", h.ID, err, out)
	}
	for _, p := range paths {
		if out, err := try(p); err == nil {
			t.Errorf("jail of %s opened %s: %q", h.ID, p, out)
		}
	}
}

package vm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/volserver"
	"github.com/moatsh/moat/internal/volume"
)

// testVolume is a real volume (a loop-mounted ext4 image of 64 MiB, root
// owned by 1000:1000) under r's data dir; it goes at the end of the test.
func testVolume(t *testing.T, r *Runtime) string {
	t.Helper()
	m, err := volume.New(filepath.Dir(r.dir))
	if err != nil {
		t.Fatal(err)
	}
	id := volume.NewID()
	ctx := context.Background()
	if err := m.Create(ctx, id, 64, "1000:1000"); err != nil {
		t.Fatal(err)
	}
	root, release, err := m.Acquire(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release()
		if err := m.Remove(ctx, id, func(context.Context) error { return nil }); err != nil {
			t.Errorf("remove volume: %v", err)
		}
	})
	return root
}

// volServerPID is the PID of sandbox id's volume server (0: none).
func volServerPID(r *Runtime, id string) int {
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.vols == nil {
		return 0
	}
	return b.vols.PID()
}

// volServers lists the processes whose command line names a volume
// server of id.
func volServers(id string) []int { return volserver.Running(id) }

// TestVolumes mounts a volume into a microVM and checks its server's
// jail, ownership on the volume, symlinks and device nodes, the quota, a
// crash of the server, pause and resume, adoption by a restarted runtime
// and that a kill leaves nothing.
func TestVolumes(t *testing.T) {
	r := testRuntime(t)
	src := testVolume(t, r)
	spec := testSpec(newID())
	spec.Volumes = []runtime.VolumeMount{{Source: src, Target: "/data"}}
	h := createSpec(t, r, spec)
	ids, err := idmap.Read(r.sandboxDir(h.ID))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("jail", func(t *testing.T) { checkVolumeJail(t, r, h, ids) })
	t.Run("ownership", func(t *testing.T) { checkVolumeOwners(t, h, src) })
	t.Run("symlinks", func(t *testing.T) { checkVolumeSymlinks(t, r, h, src) })
	t.Run("mknod", func(t *testing.T) { checkVolumeMknod(t, h, src) })
	t.Run("quota", func(t *testing.T) {
		out, err := run(h, "user", time.Minute, "sh", "-c", "dd if=/dev/zero of=/data/big bs=1M count=80; sync; rm -f /data/big")
		if !strings.Contains(out, "No space left") {
			t.Errorf("dd past the 64 MiB volume: %v, %q (want ENOSPC)", err, out)
		}
	})
	if err := r.Snapshot(context.Background(), h.ID, "s"+newID()); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Snapshot of a sandbox with volumes = %v, want invalid argument", err)
	}
	t.Run("server crash", func(t *testing.T) { checkVolumeServerCrash(t, r, h, src) })
	h = checkVolumePauseResume(t, r, h, src)
	r = checkVolumeAdopted(t, r, h)
	killAndCheck(t, r, h)
	if pids := volServers(h.ID); len(pids) > 0 {
		t.Errorf("volume servers %v left after Kill", pids)
	}
	if b, err := os.ReadFile(filepath.Join(src, "u.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("the volume lost u.txt after the kill: %q %v", b, err)
	}
}

// checkVolumeJail: the server runs as the sandbox's host IDs, with only
// nfsd.Caps in a user namespace of the sandbox's range, no_new_privs,
// namespaces of its own, in the sandbox's cgroup, seeing only its
// volume.
func checkVolumeJail(t *testing.T, r *Runtime, h *runtime.Handle, ids idmap.Range) {
	pid := volServerPID(r, h.ID)
	if pid == 0 {
		t.Fatal("no volume server")
	}
	if got := volServers(h.ID); !slices.Equal(got, []int{pid}) {
		t.Errorf("volume servers of %s: %v, want [%d]", h.ID, got, pid)
	}
	st := procStatus(t, pid)
	t.Logf("volume server %d: VmRSS %s", pid, st["VmRSS"])
	host := strconv.Itoa(ids.Root())
	for _, k := range []string{"Uid", "Gid"} {
		if f := strings.Fields(st[k]); len(f) != 4 || f[0] != host || f[1] != host || f[2] != host || f[3] != host {
			t.Errorf("%s: %q, want %s everywhere", k, st[k], host)
		}
	}
	for k, want := range map[string]string{"CapEff": "00000000000000df", "CapPrm": "00000000000000df", "CapBnd": "00000000000000df",
		"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"} {
		if st[k] != want {
			t.Errorf("%s = %q, want %q", k, st[k], want)
		}
	}
	for _, f := range []string{"uid_map", "gid_map"} {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		if got := strings.Fields(string(b)); !slices.Equal(got, []string{"0", host, "65536"}) {
			t.Errorf("%s = %q, want 0 %s 65536", f, b, host)
		}
	}
	for _, ns := range []string{"user", "mnt", "net", "pid", "ipc", "uts"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + ns)
		if err != nil || its == mine {
			t.Errorf("%s namespace %q, the host's %q: want its own", ns, its, mine)
		}
	}
	mi, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	var points []string
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		points = append(points, f[4])
		if f[4] == "/v0" && (!strings.Contains(f[5], "idmapped") || !strings.Contains(f[5], "nosymfollow") || !strings.Contains(f[5], "noexec")) {
			t.Errorf("volume mount options %q", f[5])
		}
		if f[4] == "/" && !strings.HasPrefix(f[5], "ro,") {
			t.Errorf("root mount options %q, want read-only", f[5])
		}
	}
	if !slices.Equal(points, []string{"/v0", "/"}) && !slices.Equal(points, []string{"/", "/v0"}) {
		t.Errorf("the server's mounts: %v, want only / and /v0:\n%s", points, mi)
	}
	root, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/root")
	if err != nil || len(root) != 1 || root[0].Name() != "v0" {
		t.Errorf("the server's root holds %v (%v), want only v0", root, err)
	}
	cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if !strings.Contains(string(cg), r.cgroupPath(h.ID)) {
		t.Errorf("cgroup %q, want %s", cg, r.cgroupPath(h.ID))
	}
}

func hostOwner(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return strconv.Itoa(int(st.Uid)) + ":" + strconv.Itoa(int(st.Gid))
}

// checkVolumeOwners: guest uid N is N on the volume's filesystem.
func checkVolumeOwners(t *testing.T, h *runtime.Handle, src string) {
	out, err := run(h, "user", 30*time.Second, "sh", "-c", "echo hi > /data/u.txt && stat -c %u:%g /data/u.txt && id -u")
	if err != nil || out != "1000:1000\n1000\n" {
		t.Fatalf("write as user: %q %v", out, err)
	}
	if got := hostOwner(t, filepath.Join(src, "u.txt")); got != "1000:1000" {
		t.Errorf("the guest user's file is %s on the host image, want 1000:1000", got)
	}
	sh(t, h, "mkdir /data/r && echo root > /data/r/f && chown 1234:4321 /data/r/f && touch /data/r/g")
	if got := hostOwner(t, filepath.Join(src, "r")); got != "0:0" {
		t.Errorf("guest root's dir is %s on the host image", got)
	}
	if got := hostOwner(t, filepath.Join(src, "r", "f")); got != "1234:4321" {
		t.Errorf("chowned file is %s on the host image", got)
	}
	if out, err := run(h, "user", 30*time.Second, "sh", "-c", "echo x >> /data/r/g"); err == nil {
		t.Errorf("user wrote root's 0644 file: %q", out)
	}
	// A file the other side of the volume writes (a container, the API).
	if err := os.WriteFile(filepath.Join(src, "host.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, h, "cat /data/host.txt"); got != "from the host" {
		t.Errorf("guest reads %q", got)
	}
}

// checkVolumeSymlinks: symlinks planted on the volume (by the guest or
// another sharer) are the guest's to follow, in the guest; the server
// never follows them, and its namespace holds nothing to reach.
func checkVolumeSymlinks(t *testing.T, r *Runtime, h *runtime.Handle, src string) {
	for name, target := range map[string]string{"hostpasswd": "/etc/passwd", "hostroot": "/", "up": "../../../.."} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	guestPasswd := sh(t, h, "cat /etc/passwd")
	if got := sh(t, h, "cat /data/hostpasswd"); got != guestPasswd || strings.Contains(got, "daemon:") {
		t.Errorf("/data/hostpasswd read %q, want the guest's own %q", got, guestPasswd)
	}
	if got, want := sh(t, h, "ls /data/hostroot/"), sh(t, h, "ls /"); got != want {
		t.Errorf("/data/hostroot/ lists %q, want the guest's / %q", got, want)
	}
	sh(t, h, "ln -s /etc/shadow /data/g1 && ln -s ../../../../../tmp /data/g2 && echo guest > /data/g2/moat-vol-escape")
	for name, want := range map[string]string{"g1": "/etc/shadow", "g2": "../../../../../tmp"} {
		if got, err := os.Readlink(filepath.Join(src, name)); err != nil || got != want {
			t.Errorf("guest symlink %s on the volume: %q %v", name, got, err)
		}
	}
	for _, p := range []string{"/tmp/moat-vol-escape", filepath.Join(filepath.Dir(src), "tmp", "moat-vol-escape")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a write through a guest symlink reached the host: %s", p)
		}
	}
	if got := sh(t, h, "cat /tmp/moat-vol-escape"); got != "guest" {
		t.Errorf("the write through g2 went to %q, not the guest's /tmp", got)
	}
	if pid := volServerPID(r, h.ID); pid != 0 {
		for _, p := range []string{"etc", "proc", "tmp", "usr", "v0/../../etc"} {
			if _, err := os.Lstat("/proc/" + strconv.Itoa(pid) + "/root/" + p); err == nil {
				t.Errorf("the server's namespace has %s", p)
			}
		}
	}
}

// checkVolumeMknod: no device nodes on a volume, FIFOs are fine.
func checkVolumeMknod(t *testing.T, h *runtime.Handle, src string) {
	out, err := run(h, "root", 30*time.Second, "mknod", "/data/null", "c", "1", "3")
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("mknod of a device on the volume: %q, %v (want EPERM)", out, err)
	}
	if _, err := os.Lstat(filepath.Join(src, "null")); err == nil {
		t.Error("a device node exists on the volume")
	}
	sh(t, h, "mkfifo /data/fifo")
	if fi, err := os.Lstat(filepath.Join(src, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("mkfifo on the volume: %v", err)
	}
}

// checkVolumeServerCrash: a SIGKILLed server is started again and the
// guest's I/O carries on (a hard mount retries).
func checkVolumeServerCrash(t *testing.T, r *Runtime, h *runtime.Handle, src string) {
	old := volServerPID(r, h.ID)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for volServerPID(r, h.ID) == old || volServerPID(r, h.ID) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the volume server was not started again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if got := sh(t, h, "cat /data/u.txt && echo after-crash > /data/c.txt"); got != "hi" {
		t.Errorf("after a server crash the guest reads %q", got)
	}
	t.Logf("first volume I/O after a server crash took %v", time.Since(start).Round(time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(src, "c.txt")); string(b) != "after-crash\n" {
		t.Errorf("c.txt on the host: %q", b)
	}
}

// checkVolumePauseResume: a paused sandbox has no server; after a resume
// the guest's mount works (it reconnects to the new one).
func checkVolumePauseResume(t *testing.T, r *Runtime, h *runtime.Handle, src string) *runtime.Handle {
	ctx := context.Background()
	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	if pids := volServers(h.ID); len(pids) > 0 {
		t.Errorf("volume servers %v of a paused sandbox", pids)
	}
	h2, err := r.Resume(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := sh(t, h2, "cat /data/u.txt && echo after-resume > /data/p.txt && cat /data/p.txt"); got != "hi\nafter-resume" {
		t.Errorf("after a resume the guest reads %q", got)
	}
	t.Logf("first volume I/O after a resume took %v", time.Since(start).Round(time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(src, "p.txt")); string(b) != "after-resume\n" {
		t.Errorf("p.txt on the host: %q", b)
	}
	return h2
}

// checkVolumeAdopted: a restarted runtime adopts the running server (the
// same process) and the guest keeps using it; it returns that runtime.
func checkVolumeAdopted(t *testing.T, r *Runtime, h *runtime.Handle) *Runtime {
	pid := volServerPID(r, h.ID)
	b, _ := r.boxes.Lookup(h.ID)
	b.mu.Lock()
	b.vols.Detach() // as if this server had crashed
	b.vols = nil
	b.mu.Unlock()
	r2 := restarted(t, r)
	t.Cleanup(func() { _ = r.Kill(context.Background(), h.ID) }) // r's bookkeeping
	if _, err := r2.Recover(context.Background(), []string{h.ID}); err != nil {
		t.Fatal(err)
	}
	if got := volServerPID(r2, h.ID); got != pid {
		t.Errorf("after a restart the server is %d, want %d adopted", got, pid)
	}
	if got := sh(t, h, "cat /data/p.txt"); got != "after-resume" {
		t.Errorf("after a restart the guest reads %q", got)
	}
	return r2
}

package oci

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/testkit"
)

func TestPerSandbox(t *testing.T) {
	for _, tc := range []struct {
		m    mountinfo.Entry
		want bool
	}{
		{mountinfo.Entry{MountPoint: "/var/lib/moat/sandboxes/i1/rootfs", FSType: "overlay", Source: "overlay"}, true},
		{mountinfo.Entry{MountPoint: "/var/lib/moat/vm/sandboxes/i1/log", FSType: "tmpfs", Source: "tmpfs"}, true},
		{mountinfo.Entry{MountPoint: "/var/lib/moat/volumes/v1/mnt", FSType: "ext4", Source: "/dev/loop7"}, true},
		{mountinfo.Entry{MountPoint: "/run/netns/moat-i1", FSType: "nsfs", Source: "nsfs"}, true},
		{mountinfo.Entry{MountPoint: "/", FSType: "ext4", Source: "/dev/vda"}, false},
		{mountinfo.Entry{MountPoint: "/sys/fs/cgroup", FSType: "cgroup2", Source: "cgroup2"}, false},
		{mountinfo.Entry{MountPoint: "/var/lib/moat/sandboxes", FSType: "ext4", Source: "/dev/vdb"}, false},
	} {
		if got := perSandbox(tc.m); got != tc.want {
			t.Errorf("perSandbox(%s on %s) = %v, want %v", tc.m.FSType, tc.m.MountPoint, got, tc.want)
		}
	}
	for _, tc := range []struct {
		path, dir string
		want      bool
	}{{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/a/b", "/a/", true}, {"/", "/a", false}} {
		if got := within(tc.path, tc.dir); got != tc.want {
			t.Errorf("within(%q, %q) = %v", tc.path, tc.dir, got)
		}
	}
}

// TestLeanNamespace: a command started for a bundle sees the bundle's
// mounts, its outside bind sources and its namespace paths, whenever they
// were mounted, and no other sandbox's mounts; the host's table is left
// as it was.
func TestLeanNamespace(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	sandboxes := filepath.Join(dir, "sandboxes")
	mount := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(p, unix.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(p, "marker"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c, vol := filepath.Join(sandboxes, "a"), filepath.Join(sandboxes, "b"), filepath.Join(sandboxes, "c"), filepath.Join(dir, "volumes", "v1", "mnt")
	mount(filepath.Join(a, "rootfs"))
	mount(filepath.Join(b, "rootfs"))
	o := &CLI{Name: "crun", hideCgroup2: isHybrid()}
	if err := o.EnableLean(sandboxes); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := errors.Join(o.Close(), o.Close()); err != nil {
			t.Errorf("close twice: %v", err)
		}
	}()
	mount(filepath.Join(a, "disk")) // after the base was made
	mount(filepath.Join(c, "rootfs"))
	mount(vol)
	// A file bind-mounted after the base, as a netns is on /run/netns.
	ns, nsSrc := filepath.Join(dir, "netns", "a"), filepath.Join(dir, "ns-a")
	if err := os.MkdirAll(filepath.Dir(ns), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{{ns, ""}, {nsSrc, "the sandbox's netns\n"}} {
		if err := os.WriteFile(f[0], []byte(f[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(nsSrc, ns, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(ns, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(a, "config.json"),
		[]byte(`{"mounts":[{"type":"bind","source":"`+vol+`","destination":"/data","options":["rbind"]},`+
			`{"type":"bind","source":"`+filepath.Join(a, "sys")+`","destination":"/sys"},{"type":"proc","source":"proc","destination":"/proc"}],`+
			`"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"`+ns+`"}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	hostBefore, err := mountinfo.Read(mountinfo.Path)
	if err != nil {
		t.Fatal(err)
	}
	if o.leanFor(a) == nil || o.leanFor(sandboxes) != nil || o.leanFor(dir) != nil {
		t.Fatal("leanFor: a bundle under the sandboxes' directory only")
	}
	var out strings.Builder
	cmd := exec.Command("sh", "-c", "cat /proc/self/mountinfo; cat "+filepath.Join(a, "rootfs", "marker")+" "+filepath.Join(a, "disk", "marker")+" "+filepath.Join(vol, "marker")+" "+ns)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := o.lean.run(cmd, a); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{" " + filepath.Join(a, "rootfs") + " ", " " + filepath.Join(a, "disk") + " ", " " + vol + " ", "the sandbox's netns"} {
		if !strings.Contains(got, want) {
			t.Errorf("the lean namespace lacks %s:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{filepath.Join(b, "rootfs"), filepath.Join(c, "rootfs")} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the lean namespace has another sandbox's %s", unwanted)
		}
	}
	if o.hideCgroup2 && strings.Contains(got, " "+cgroup2Mount+" ") {
		t.Errorf("the lean namespace shows %s on a hybrid host", cgroup2Mount)
	}
	if lines := strings.Count(got, "\n"); lines > len(hostBefore) {
		t.Errorf("the lean namespace has %d mounts, the host %d", lines, len(hostBefore))
	}
	// RunCmd's short commands (kill, delete) start in a copy of the base on
	// a hybrid host, and in the host's namespace elsewhere.
	out.Reset()
	run := exec.Command("cat", "/proc/self/mountinfo")
	run.Stdout, run.Stderr = &out, &out
	if err := o.RunCmd(run); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if sees := strings.Contains(out.String(), " "+filepath.Join(b, "rootfs")+" "); sees == o.hideCgroup2 {
		t.Errorf("RunCmd sees another sandbox's mount: %v, want %v (hybrid host: %v)", sees, !o.hideCgroup2, o.hideCgroup2)
	}
	hostAfter, err := mountinfo.Read(mountinfo.Path)
	if err != nil || len(hostAfter) != len(hostBefore) {
		t.Fatalf("the host's mounts went from %d to %d (%v)", len(hostBefore), len(hostAfter), err)
	}
}

// The thread that starts a command in a lean namespace stays in it until
// the command ended, so that the command's exit does not free the
// namespace (and wait for an RCU grace period) while Moat waits for it.
func TestLeanThreadOutlivesCommand(t *testing.T) {
	testkit.RequireRoot(t)
	o := &CLI{Name: "crun"}
	if err := o.EnableLean(filepath.Join(t.TempDir(), "sandboxes")); err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	script := fmt.Sprintf(`me=$(readlink /proc/self/ns/mnt); sleep 0.2; for t in /proc/%d/task/*; do [ "$(readlink $t/ns/mnt)" = "$me" ] && echo held; done; true`, os.Getpid())
	var out strings.Builder
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := o.lean.runWith(cmd, nil); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if !strings.Contains(out.String(), "held") {
		t.Errorf("no thread of the server was in the command's namespace while it ran: %q", out.String())
	}
}

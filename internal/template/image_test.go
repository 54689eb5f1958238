package template

import (
	"context"
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/template/rootfs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/oci/ocitest"
	"github.com/moatsh/moat/internal/testkit"
)

// busyboxImage is a root with busybox as /bin/sh and nothing else: no
// /etc/passwd, no bash, no package manager, no /tmp.
func busyboxImage(t *testing.T, extra ...ocitest.Entry) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		testkit.Missing(t, "busybox not installed (apt-get install busybox-static): %v", err)
	}
	entries := append([]ocitest.Entry{
		ocitest.Dir("bin", 0o755), ocitest.Dir("etc", 0o755),
		ocitest.File("bin/busybox", 0o755, string(bb)),
		ocitest.Symlink("bin/sh", "busybox"),
		ocitest.File("etc/os-release", 0o644, "ID=busybox\n"),
	}, extra...)
	cfg := v1.Config{Env: []string{"PATH=/bin:/usr/local/bin", "FOO=bar"}, WorkingDir: "/home/user", Cmd: []string{"/bin/sh"}}
	return ocitest.Image(t, "linux/amd64", cfg, ocitest.Layer(t, ocitest.Tar(t, entries...)))
}

func TestBuildFromImage(t *testing.T) {
	opts, _ := testEnv(t)
	reg := ocitest.NewRegistry(t, "", "")
	reg.PushImage(t, "tiny/busybox:1", busyboxImage(t))
	ctx := context.Background()
	src := ImageSource{Ref: reg.Ref("tiny/busybox:1")}

	start := time.Now()
	res, err := BuildFromImage(ctx, "tiny", src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("build from image: %v (%d registry requests)", time.Since(start), reg.Requests.Load())
	dir := res.Result.RootfsDir
	if res.Result.Cached || dir != (Layout{DataDir: opts.DataDir}).RootfsDir("tiny") {
		t.Fatalf("result = %+v", res.Result)
	}
	checkRootfs(t, dir, opts.EnvdPath)
	want := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
		"etc/group":  "root:x:0:\nuser:x:1000:\n",
	}
	for name, w := range want {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != w {
			t.Errorf("%s = %q, want %q", name, b, w)
		}
	}
	shadow, _ := os.ReadFile(filepath.Join(dir, "etc/shadow"))
	if !strings.Contains(string(shadow), "\nuser:!:") {
		t.Errorf("etc/shadow = %q", shadow)
	}
	for name, mode := range map[string]os.FileMode{
		"etc/shadow": 0o640, "tmp": os.ModeDir | os.ModeSticky | 0o777, "home/user": os.ModeDir | 0o750,
		"usr/local/bin/envd": 0o755, "etc/hosts": 0o644, "etc/resolv.conf": 0o644,
	} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, mode)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dir, "home/user"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("home/user owner %d:%d, %v", st.Uid, st.Gid, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "etc/sudoers.d")); err == nil {
		t.Error("sudoers.d written without sudo")
	}
	// The image's own shell sees the account.
	out, err := exec.Command("chroot", "--userspec=1000:1000", dir, "/bin/sh", "-c", "id -un; id -gn; cd ~user && pwd").CombinedOutput()
	if err != nil || string(out) != "user\nuser\n/home/user\n" {
		t.Errorf("id in rootfs: %q, %v", out, err)
	}

	info, err := ReadImageInfo(opts.DataDir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := ImageInfo{Ref: src.Ref, Digest: res.Image.Digest, Platform: "linux/amd64",
		Config: oci.Config{Env: []string{"PATH=/bin:/usr/local/bin", "FOO=bar"}, WorkingDir: "/home/user", Cmd: []string{"/bin/sh"}},
		User:   rootfs.Account{Name: "user", UID: 1000, GID: 1000, Shell: "/bin/sh"}}
	if fmt.Sprint(info) != fmt.Sprint(wantInfo) {
		t.Errorf("image info = %+v\nwant %+v", info, wantInfo)
	}

	// Unchanged image: no unpack, no blob download, same build.
	reg.BlobRequests.Store(0)
	res2, err := BuildFromImage(ctx, "tiny", src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res2.Result.Cached || res2.Result.EnvdUpdated || res2.Result.BuildID != res.Result.BuildID || reg.BlobRequests.Load() != 0 {
		t.Errorf("rebuild = %+v, %d blob requests", res2.Result, reg.BlobRequests.Load())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "etc/passwd")); string(b) != want["etc/passwd"] {
		t.Errorf("rebuild changed etc/passwd: %q", b)
	}
	// A new image under the same tag replaces the rootfs.
	reg.PushImage(t, "tiny/busybox:1", busyboxImage(t, ocitest.File("etc/v2", 0o644, "2\n")))
	res3, err := BuildFromImage(ctx, "tiny", src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res3.Result.Cached || res3.Result.BuildID == res.Result.BuildID {
		t.Errorf("new image: %+v", res3.Result)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/v2")); err != nil {
		t.Error(err)
	}
}

func TestBuildFromImageExistingAccounts(t *testing.T) {
	opts, _ := testEnv(t)
	reg := ocitest.NewRegistry(t, "", "")
	img := busyboxImage(t,
		ocitest.File("etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh"),
		ocitest.File("etc/group", 0o644, "root:x:0:\nshadow:x:42:\nnode:x:1000:\n"),
		ocitest.File("etc/shadow", 0o640, "root:*:19000:0:99999:7:::\nnode:!:19000:0:99999:7:::\n"),
		ocitest.Dir("usr", 0o755), ocitest.Dir("usr/bin", 0o755),
		ocitest.File("usr/bin/sudo", 0o4755, "not really sudo"),
	)
	reg.PushImage(t, "node/like:1", img)
	res, err := BuildFromImage(context.Background(), "nodeish", ImageSource{Ref: reg.Ref("node/like:1")}, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := res.Result.RootfsDir
	if u := res.Image.User; u.UID != 1001 || u.GID != 1001 {
		t.Errorf("user = %+v, want 1001:1001 (1000 is node's)", u)
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
	if want := "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\nuser:x:1001:1001:user:/home/user:/bin/sh\n"; string(passwd) != want {
		t.Errorf("passwd = %q", passwd)
	}
	var st syscall.Stat_t
	_ = syscall.Lstat(filepath.Join(dir, "etc/shadow"), &st)
	if st.Gid != 42 || st.Mode&0o777 != 0o640 {
		t.Errorf("shadow: gid %d mode %o", st.Gid, st.Mode&0o777)
	}
	sudoers, err := os.ReadFile(filepath.Join(dir, "etc/sudoers.d/user"))
	if err != nil || string(sudoers) != "user ALL=(ALL:ALL) NOPASSWD: ALL\n" {
		t.Errorf("sudoers: %q, %v", sudoers, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "etc/sudoers.d/user")); err != nil || fi.Mode() != 0o440 {
		t.Errorf("sudoers mode: %v", err)
	}
}

func TestBuildFromImageFailuresLeaveNothing(t *testing.T) {
	opts, _ := testEnv(t)
	reg := ocitest.NewRegistry(t, "", "")
	zeros := strings.Repeat("\x00", 32<<20)
	reg.PushImage(t, "bad/escape:1", ocitest.Image(t, "linux/amd64", v1.Config{},
		ocitest.Layer(t, ocitest.Tar(t, ocitest.File("ok", 0o644, "ok"))),
		ocitest.Layer(t, ocitest.Tar(t, ocitest.Symlink("a", "/etc"), ocitest.File("a/passwd", 0o644, "pwned")))))
	reg.PushImage(t, "bad/bomb:1", ocitest.Image(t, "linux/amd64", v1.Config{},
		ocitest.Layer(t, ocitest.Tar(t, ocitest.File("zeros", 0o644, zeros)))))
	tests := []struct {
		name string
		src  ImageSource
		kind error
	}{
		{"escape", ImageSource{Ref: reg.Ref("bad/escape:1")}, oci.ErrUnsafeLayer},
		{"bomb", ImageSource{Ref: reg.Ref("bad/bomb:1"), MaxSize: 8 << 20}, oci.ErrTooLarge},
		{"missing", ImageSource{Ref: reg.Ref("bad/none:1")}, oci.ErrImageNotFound},
	}
	lay := Layout{DataDir: opts.DataDir}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildFromImage(context.Background(), "bad-"+tt.name, tt.src, opts)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			t.Log(err)
			if _, err := os.Lstat(lay.TemplateDir("bad-" + tt.name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("template dir left behind: %v", err)
			}
			if ents, _ := os.ReadDir(lay.imageWorkDir()); len(ents) != 0 {
				t.Errorf("work dirs left behind: %v", ents)
			}
		})
	}
	if b, _ := os.ReadFile("/etc/passwd"); strings.Contains(string(b), "pwned") {
		t.Fatal("host /etc/passwd written")
	}
}

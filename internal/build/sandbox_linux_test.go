package build

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

// realEnv is newEnv whose builds run in real build sandboxes (the
// container runtime, own network scope and cgroup parent) over a busybox
// template "bb", with the real envd. Without root, runc or busybox it is
// testkit.Missing (a failure under MOAT_TEST_REQUIRE=1).
func realEnv(t *testing.T) *env {
	t.Helper()
	testkit.RequireRoot(t) // build sandboxes
	testkit.RequireTool(t, "runc")
	bb := testkit.RequireTool(t, "busybox")
	envd := os.Getenv("MOAT_ENVD")
	if envd == "" {
		envd = filepath.Join(t.TempDir(), "envd")
		build := exec.Command("go", "build", "-o", envd, "github.com/moatsh/moat/cmd/envd")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build envd: %v: %s", err, out)
		}
	}
	e := newEnv(t)
	e.m.cfg.EnvdPath = envd
	// The sandboxes' roots (unprivileged host IDs) traverse the data dir:
	// t.TempDir() and testing's per-test parent of it are 0700.
	for _, p := range []string{filepath.Dir(e.data), filepath.Dir(filepath.Dir(e.data))} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	rootfs := filepath.Join(filepath.Dir(e.data), "bb")
	for _, d := range []string{"bin", "etc", "tmp", "root", "home/user", "proc", "sys", "dev", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", bb, filepath.Join(rootfs, "bin/busybox")).CombinedOutput(); err != nil {
		t.Fatalf("copy busybox: %v: %s", err, out)
	}
	for _, a := range []string{"sh", "cat", "echo", "mkdir", "rm", "chown", "chmod", "id",
		"tar", "gzip", "mktemp", "grep", "find", "dirname", "cp"} { // COPY's script

		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
		"etc/group": "root:x:0:\nuser:x:1000:\n"} {
		if err := os.WriteFile(filepath.Join(rootfs, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.UpsertTemplate(context.Background(), store.Template{ID: "bb", Name: "bb", RootfsDir: rootfs}); err != nil {
		t.Fatal(err)
	}
	e.m.cfg.Runner = newTestRunner(t, e.data)
	return e
}

// newTestRunner is a SandboxRunner over a container runtime of its own
// (runc; with opts such as container.WithGVisor, another backend).
func newTestRunner(t *testing.T, dataDir string, opts ...container.Option) *SandboxRunner {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	np, err := netpolicy.New(log, netpolicy.WithScope("moatbc", "bc", netip.MustParsePrefix("10.236.0.0/16")))
	testkit.RequireNoErr(t, err, "network policy") // our own component failing to start
	stateRoot := filepath.Join("/run", "moatbc-"+randomLower(8))
	opts = append([]container.Option{container.WithOCIRuntime("runc"), container.WithStateRoot(stateRoot),
		container.WithCgroupParent("/moatbc"), container.WithNetwork(np)}, opts...)
	rt, err := container.New(ctx, runtime.Config{DataDir: dataDir, Logger: log}, opts...)
	if err != nil {
		np.Close()
		testkit.Missing(t, "container runtime: %v", err) // our own component failing to start
	}
	t.Cleanup(func() {
		_ = rt.Close()
		_ = os.RemoveAll(stateRoot)
		_ = cgroups.RemoveAll("/moatbc")
	})
	r, err := NewSandboxRunner(rt, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	r.MemoryMiB, r.DiskMiB = 256, 0
	return r
}

// TestRealRebuildReusesLayers: with real build sandboxes, a rebuild with
// its last step changed reuses the layer of the first and runs only the
// last, and the changed file does not reach the earlier template or layer.
func TestRealRebuildReusesLayers(t *testing.T) {
	e := realEnv(t)
	steps := func(last string) []Step {
		return []Step{
			{Type: "RUN", Args: []string{"echo one > /etc/one && id -un > /home/user/who", "root"}},
			{Type: "RUN", Args: []string{last, "root"}},
		}
	}
	b, err := e.build(t, "a", "r1", Spec{FromTemplate: "bb", Steps: steps("echo two > /tmp/two")})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("cold build = %+v, %v\n%s", b, err, logText(e, b.ID))
	}
	b, err = e.build(t, "a", "r2", Spec{FromTemplate: "bb", Steps: steps("echo changed > /etc/one")})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("rebuild = %+v, %v\n%s", b, err, logText(e, b.ID))
	}
	log := logText(e, b.ID)
	if !strings.Contains(log, "[1/2] CACHED RUN echo one > /etc/one") || !strings.Contains(log, "[2/2] RUN echo changed > /etc/one (as root)") {
		t.Fatalf("rebuild log:\n%s", log)
	}
	r1, r2 := rootfsOf(t, e, "r1"), rootfsOf(t, e, "r2")
	for _, c := range []struct{ root, file, want string }{
		{r1, "etc/one", "one\n"}, {r1, "tmp/two", "two\n"}, {r1, "home/user/who", "root\n"},
		{r2, "etc/one", "changed\n"}, {r2, "home/user/who", "root\n"},
	} {
		if got := readFile(t, c.root, c.file); got != c.want {
			t.Errorf("%s in %s = %q, want %q", c.file, filepath.Base(filepath.Dir(c.root)), got, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(r2, "tmp/two")); !os.IsNotExist(err) {
		t.Errorf("the old last step's file is in the rebuilt template: %v", err)
	}
}

// TestRealBuildOnGVisor: on a server whose runtimes are gvisor (and vm),
// RUN and COPY steps run in gVisor build sandboxes: its writable layer is
// on the host like a container's (runsc --overlay2=none).
func TestRealBuildOnGVisor(t *testing.T) {
	e := realEnv(t)
	runsc := testkit.RequireTool(t, "runsc")
	e.m.cfg.Runner = newTestRunner(t, e.data, container.WithGVisor(container.GVisorConfig{Binary: runsc}))
	if got := e.m.cfg.Runner.(*SandboxRunner).rt.Name(); got != "gvisor" {
		t.Fatalf("runner runtime = %s", got)
	}
	hash := strings.Repeat("cd", 32)
	p := FilesPath(e.data, "a", hash)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	writeArchive(t, p, []entry{{name: "app", dir: true}, {name: "app/main.sh", body: "echo hi\n"}})
	b, err := e.build(t, "a", "g1", Spec{FromTemplate: "bb", Steps: []Step{
		{Type: "RUN", Args: []string{"echo gvisor > /etc/made-in", "root"}},
		{Type: "COPY", Args: []string{"app", "/opt/app/"}, FilesHash: hash},
	}})
	if err != nil || b.Status != store.BuildReady {
		t.Fatalf("build = %+v, %v\n%s", b, err, logText(e, b.ID))
	}
	root := rootfsOf(t, e, "g1")
	if got := readFile(t, root, "etc/made-in"); got != "gvisor\n" {
		t.Errorf("RUN's file = %q", got)
	}
	if got := readFile(t, root, "opt/app/main.sh"); got != "echo hi\n" {
		t.Errorf("COPY's file = %q", got)
	}
}

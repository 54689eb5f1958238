package container

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container/oci"
	"github.com/moatsh/moat/internal/testkit"
)

// testRootfs is a tiny template: busybox, the real envd (cmd/envd) as
// /usr/local/bin/envd and fakeenvd, by name, as /usr/local/bin/probe for
// the isolation tests. Empty when the host cannot run the real-runtime
// tests.
var (
	testRootfs  string
	setupErr    error // why TestMain could not set the tests up: a missing prerequisite or a failed build
	testScope   = "moattc"
	testCgroups = "/moattc"
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := setupRootfs()
		setupErr = err
		testRootfs = dir
		if dir != "" {
			defer os.RemoveAll(dir)
		}
		return m.Run()
	}()
	_ = cgroups.RemoveAll(testCgroups) // the tests' parent cgroup
	os.Exit(code)
}

// setupRootfs makes testRootfs. Its error, a missing tool or a failed go
// build, is reported by every test through testkit.Missing: a failure
// under MOAT_TEST_REQUIRE=1. There is no stand-in for an envd that does
// not build.
func setupRootfs() (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("needs root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return "", fmt.Errorf("runc not installed (apt-get install runc)")
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("busybox not installed (apt-get install busybox-static)")
	}
	dir, err := os.MkdirTemp("", "moat-rootfs-")
	if err != nil {
		return "", err
	}
	for _, d := range []string{"bin", "etc", "tmp", "root", "home/user", "proc", "sys", "dev", "usr/local/bin", "var"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return dir, err
		}
	}
	_ = os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
	_ = os.Chown(filepath.Join(dir, "home/user"), 1000, 1000)
	if out, err := exec.Command("cp", bb, filepath.Join(dir, "bin/busybox")).CombinedOutput(); err != nil {
		return dir, fmt.Errorf("copy busybox: %v: %s", err, out)
	}
	for _, a := range []string{"sh", "cat", "ls", "echo", "sleep", "seq", "true", "id", "ps", "touch", "unshare", "mount", "grep", "nc", "wget"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			return dir, err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
		"etc/group":  "root:x:0:\ntty:x:5:\nuser:x:1000:\n",
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			return dir, err
		}
	}
	// The real envd; fakeenvd only as the isolation tests' probe, by name.
	if err := goBuild(filepath.Join(dir, "usr/local/bin/envd"), "github.com/moatsh/moat/cmd/envd"); err != nil {
		return dir, err
	}
	if err := goBuild(filepath.Join(dir, "usr/local/bin/probe"), "./internal/fakeenvd"); err != nil {
		return dir, err
	}
	return dir, nil
}

// goBuild builds a static binary.
func goBuild(out, pkg string) error {
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v: %s", pkg, err, b)
	}
	return nil
}

// requireRuntime is testkit.Missing when TestMain could not set the
// tests up.
func requireRuntime(t testing.TB) {
	t.Helper()
	if setupErr != nil {
		testkit.Missing(t, "container runtime tests: %v", setupErr)
	}
}

func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "i" + hex.EncodeToString(b)
}

// newTestRuntime uses its own state root, cgroup parent, nft table, interface
// prefix and subnet, so it never touches a running server's sandboxes. It
// makes no slots unless opts ask for them (slots_linux_test.go).
func newTestRuntime(t testing.TB, oci string, opts ...Option) *Runtime {
	t.Helper()
	requireRuntime(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	np, err := netpolicy.New(log, netpolicy.WithScope(testScope, "tc", netip.MustParsePrefix("10.202.0.0/16")))
	if err != nil {
		t.Fatal(err)
	}
	fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	t.Cleanup(func() { _ = os.WriteFile("/proc/sys/net/ipv4/ip_forward", fwd, 0o644) })
	stateRoot := filepath.Join("/run", testScope+"-"+newID())
	dataDir := t.TempDir()
	// testing's per-test parent of TempDirs is 0700; the sandboxes' roots
	// must traverse it (see traversable).
	if err := os.Chmod(filepath.Dir(dataDir), 0o711); err != nil {
		t.Fatal(err)
	}
	r, err := New(context.Background(), runtime.Config{DataDir: dataDir, Logger: log},
		append([]Option{WithOCIRuntime(oci), WithStateRoot(stateRoot), WithCgroupParent(testCgroups), WithNetwork(np), WithPrelaunch(0)},
			opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := r.Recover(context.Background(), nil); err != nil {
			t.Errorf("final recover: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		_ = os.RemoveAll(stateRoot)
	})
	return r
}

// ociRuntimes lists the OCI runtimes a test runs its cases with: runc,
// which TestMain's setup requires, and crun. A missing crun is a missing
// prerequisite, reported by a subtest of its name (testkit.Missing).
func ociRuntimes(t *testing.T) []string {
	t.Helper()
	requireRuntime(t)
	out := []string{"runc"}
	if _, err := exec.LookPath("crun"); err == nil {
		out = append(out, "crun")
	} else {
		t.Run("crun", func(t *testing.T) { testkit.Missing(t, "crun not on PATH (apt-get install crun)") })
	}
	return out
}

func create(t testing.TB, r *Runtime, spec runtime.Spec) *runtime.Handle {
	t.Helper()
	if spec.ID == "" {
		spec.ID = newID()
	}
	spec.RootfsDir = testRootfs
	h, err := r.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), spec.ID) })
	return h
}

// get calls envd (/health) on the sandbox.
func get(h *runtime.Handle, path string, q url.Values, timeout time.Duration) (int, string, error) {
	return getPort(h, envdPort, path, q, timeout)
}

// probePort is where the isolation tests run fakeenvd inside a sandbox.
const probePort = 49984

// startProbe runs fakeenvd on probePort inside the sandbox (`exec -d`, stdio
// to /dev/null) and waits until it answers.
func startProbe(t *testing.T, r *Runtime, h *runtime.Handle) {
	t.Helper()
	cmd := r.oci.Command(context.Background(), "exec", "-d", r.containerName(h.ID), "/usr/local/bin/probe", "--port", fmt.Sprint(probePort))
	if err := r.oci.RunCmd(cmd); err != nil { // stdio stays /dev/null: a pipe would never see EOF
		t.Fatalf("start probe: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, "the probe to answer", func() bool {
		code, _, err := getPort(h, probePort, "health", nil, time.Second)
		return err == nil && code == 204
	})
}

// probe calls the fakeenvd started by startProbe.
func probe(h *runtime.Handle, path string, q url.Values, timeout time.Duration) (int, string, error) {
	return getPort(h, probePort, path, q, timeout)
}

func getPort(h *runtime.Handle, port int, path string, q url.Values, timeout time.Duration) (int, string, error) {
	c := http.Client{Timeout: timeout}
	u := fmt.Sprintf("http://%s/%s?%s", net.JoinHostPort(h.Addr.String(), fmt.Sprint(port)), path, q.Encode())
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

func execIn(r *Runtime, id string, args ...string) (string, error) {
	out, err := ociCombinedOutput(r.oci, r.oci.Command(context.Background(), append([]string{"exec", r.containerName(id)}, args...)...))
	return string(out), err
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// ociOutput is cmd.Output for an OCI runtime command (see oci.CLI.RunCmd).
func ociOutput(o *oci.CLI, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout = &out
	err := o.RunCmd(cmd)
	return out.Bytes(), err
}

// ociCombinedOutput is cmd.CombinedOutput for an OCI runtime command (see oci.CLI.RunCmd).
func ociCombinedOutput(o *oci.CLI, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := o.RunCmd(cmd)
	return out.Bytes(), err
}

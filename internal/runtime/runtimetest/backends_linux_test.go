package runtimetest_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/runtime/gvisor"
	"github.com/moatsh/moat/internal/runtime/runtimetest"
	"github.com/moatsh/moat/internal/testkit"
	"github.com/moatsh/moat/internal/testkit/hostleak"
)

func TestFake(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtimetest.Harness {
		return runtimetest.Harness{
			Runtime: orchestratortest.NewRuntime(t),
			Spec:    func(id string) runtime.Spec { return runtime.Spec{ID: id} },
		}
	})
}

func TestContainer(t *testing.T) { runBackend(t, "container") }

func TestGVisor(t *testing.T) { runBackend(t, "gvisor") }

// testRootfs is a real template root filesystem (with envd): MOAT_TEST_ROOTFS,
// else the base template of the data dir scripts/setup.sh filled
// (testkit.RequireTemplate).
func testRootfs(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MOAT_TEST_ROOTFS")
	if dir == "" {
		return testkit.RequireTemplate(t, "base")
	}
	if _, err := os.Stat(filepath.Join(dir, "usr/local/bin/envd")); err != nil {
		testkit.Missing(t, "no template rootfs with envd at MOAT_TEST_ROOTFS=%s: %v", dir, err)
	}
	return dir
}

// runBackend runs the suite on a real backend with its own network scope,
// OCI state root, cgroup parent and data dir, so it never touches a
// running server's sandboxes.
func runBackend(t *testing.T, name string) {
	testkit.RequireRoot(t)
	rootfs := testRootfs(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	np, err := netpolicy.New(log, netpolicy.WithScope("moatrt", "rt", netip.MustParsePrefix("10.237.0.0/16")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = np.Close() })
	runtimetest.Run(t, func(t *testing.T) runtimetest.Harness {
		dataDir := t.TempDir()
		if err := os.Chmod(filepath.Dir(dataDir), 0o711); err != nil { // sandbox roots traverse it
			t.Fatal(err)
		}
		stateRoot := filepath.Join("/run", "moatrt-"+runtimetest.NewID())
		t.Cleanup(func() { _ = os.RemoveAll(stateRoot) })
		opts := []container.Option{container.WithStateRoot(stateRoot), container.WithCgroupParent("/moatrt"), container.WithNetwork(np)}
		cfg := runtime.Config{DataDir: dataDir, Logger: log}
		var rt *container.Runtime
		if name == "gvisor" {
			rt, err = gvisor.New(context.Background(), cfg, gvisor.Settings{}, opts...)
		} else {
			rt, err = container.New(context.Background(), cfg, opts...)
		}
		testkit.RequireNoErr(t, err, name+" runtime")
		t.Cleanup(func() {
			if _, err := rt.Recover(context.Background(), nil); err != nil {
				t.Errorf("final recover: %v", err)
			}
		})
		return runtimetest.Harness{
			Runtime: rt,
			Spec: func(id string) runtime.Spec {
				return runtime.Spec{ID: id, RootfsDir: rootfs, VCPUs: 1, MemoryMiB: 256, Pids: 256, DiskMiB: 256, Hostname: "conf"}
			},
			Leaks: func(id string) []string { return hostleak.Of(dataDir, id) },
			Ready: envdReady,
			Envd:  true,
		}
	})
}

// envdReady waits until envd accepts TCP connections on the sandbox's address.
func envdReady(ctx context.Context, h *runtime.Handle) error {
	addr := net.JoinHostPort(h.Addr.String(), "49983")
	var last error
	for i := 0; i < 100; i++ {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return last
}

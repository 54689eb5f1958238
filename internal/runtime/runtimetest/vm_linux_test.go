package runtimetest_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/runtimetest"
	"github.com/moatsh/moat/internal/runtime/vm"
	"github.com/moatsh/moat/internal/testkit"
	"github.com/moatsh/moat/internal/testkit/hostleak"
)

// TestVM runs the suite on microVMs (QEMU; TCG without KVM), one runtime
// for all cases (it makes one template snapshot; ~15 s here in all).
func TestVM(t *testing.T) {
	testkit.RequireTool(t, "qemu-system-x86_64")
	testkit.RequireRoot(t)
	rootfs := testRootfs(t)
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	initBin := filepath.Join(dir, "moat-vminit")
	build := exec.Command("go", "build", "-o", initBin, "github.com/moatsh/moat/cmd/moat-vminit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build moat-vminit: %v: %s", err, out) // a setup build failure fails, never skips
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	np, err := netpolicy.New(log, netpolicy.WithScope("moatrv", "rv", netip.MustParsePrefix("10.238.0.0/16")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = np.Close() })
	rt, err := vm.New(context.Background(), runtime.Config{DataDir: filepath.Join(dir, "data"), Logger: log},
		vm.WithNetwork(np), vm.WithInit(initBin), vm.WithCgroupParent("/moatrv"), vm.WithPrelaunch(0))
	testkit.RequireNoErr(t, err, "vm runtime")
	// Before the TempDir goes: a spare refill must not write into it.
	t.Cleanup(func() { _ = rt.Close() })
	runtimetest.Run(t, func(t *testing.T) runtimetest.Harness {
		return runtimetest.Harness{
			Runtime: rt,
			Spec: func(id string) runtime.Spec {
				return runtime.Spec{ID: id, TemplateID: "base", RootfsDir: rootfs, VCPUs: 1, MemoryMiB: 256, Hostname: "conf"}
			},
			Leaks: func(id string) []string { return hostleak.Of(filepath.Join(dir, "data"), id) },
			Ready: envdReady,
		}
	})
	t.Run("OrchestratorReportsDeath", func(t *testing.T) { reportDeath(t, rt, rootfs) })
	if _, err := rt.Recover(context.Background(), nil); err != nil {
		t.Errorf("final recover: %v", err)
	}
}

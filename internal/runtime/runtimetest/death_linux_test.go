package runtimetest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/runtime/runtimetest"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

// reportDeath runs an orchestrator on rt, creates one sandbox, SIGKILLs
// its process (a container's init, a VM's QEMU: the process in the
// sandbox's cgroup that is PID 1 of its namespace, else the only one) and
// prints how long the orchestrator took to report the sandbox gone. The
// time is printed, not asserted; the test fails only when it is never
// reported gone.
func reportDeath(t *testing.T, rt runtime.Runtime, rootfs string) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.UpsertTemplate(ctx, store.Template{ID: "base", Name: "base", RootfsDir: rootfs, CPUCount: 1,
		MemoryMB: 256, DiskSizeMB: 512, EnvdVersion: state.Version}); err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New(orchestrator.Config{Store: db, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); o.Run(runCtx) }()
	defer func() { stop(); <-done }() // Run returns before the store closes
	sb, err := o.Create(ctx, orchestrator.CreateRequest{Team: store.DefaultTeam, Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer o.Kill(ctx, store.DefaultTeam, sb.ID) // after a failure; not found otherwise
	pid, err := sandboxProcess(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	for {
		if _, ok := o.Lookup(sb.ID); !ok {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("sandbox %s still listed 30 s after its process %d was killed", sb.ID, pid)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("%s: sandbox reported gone %v after SIGKILL of its process %d", rt.Name(), took.Round(10*time.Microsecond), pid)
	fmt.Printf("death-to-gone %s: %v\n", rt.Name(), took.Round(10*time.Microsecond))
}

// sandboxProcess finds the main process of sandbox id among those in a
// cgroup named after it.
func sandboxProcess(id string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var in []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(cg), "/"+id) {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return pid, nil // PID 1 of the sandbox's namespace
			}
		}
		in = append(in, pid)
	}
	if len(in) != 1 {
		return 0, fmt.Errorf("sandbox %s: processes %v in its cgroup, want its init or its qemu", id, in)
	}
	return in[0], nil
}

// TestContainerDeath: the orchestrator reports a container whose init was
// SIGKILLed gone (printed: how soon).
func TestContainerDeath(t *testing.T) {
	testkit.RequireRoot(t)
	rootfs := testRootfs(t)
	np, err := netpolicy.New(slog.New(slog.DiscardHandler), netpolicy.WithScope("moatrd", "rd", netip.MustParsePrefix("10.239.0.0/16")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = np.Close() })
	dataDir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dataDir), 0o711); err != nil {
		t.Fatal(err)
	}
	stateRoot := filepath.Join("/run", "moatrd-"+runtimetest.NewID())
	t.Cleanup(func() { _ = os.RemoveAll(stateRoot) })
	rt, err := container.New(context.Background(), runtime.Config{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler)},
		container.WithStateRoot(stateRoot), container.WithCgroupParent("/moatrd"), container.WithNetwork(np))
	testkit.RequireNoErr(t, err, "container runtime")
	t.Cleanup(func() { _, _ = rt.Recover(context.Background(), nil) })
	reportDeath(t, rt, rootfs)
}

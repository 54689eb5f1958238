package vm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	procpb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/kept"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/templatesnap"
	"github.com/moatsh/moat/internal/testkit"
)

// The tests share one Runtime (and so one template snapshot) per test binary.
var (
	testDir    string // temporary: rootfs, moat-vminit, data dir
	setupErr   error  // why TestMain could not set the tests up: a missing prerequisite or a failed build
	testScope  = "moatvt"
	testCgroup = "/moatvt"

	shared     *Runtime
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "moat-vmtest-")
		if err != nil {
			setupErr = err
			return m.Run()
		}
		testDir = dir
		defer os.RemoveAll(dir)
		setupErr = setupTestFiles(dir)
		code := m.Run()
		if shared != nil {
			_, _ = shared.Recover(context.Background(), nil) // everything left over goes
			_ = shared.Close()                               // no spare refill writes into dir after
			_ = shared.net.Close()
		}
		_ = cgroups.Remove(testCgroup)
		return code
	}()
	os.Exit(code)
}

// setupTestFiles builds a tiny template (busybox + envd) and moat-vminit.
// Its error, a missing tool or a failed go build, is reported by every
// test through testkit.Missing: a failure under MOAT_TEST_REQUIRE=1.
func setupTestFiles(dir string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "mkfs.ext4", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not installed (apt-get install qemu-system-x86 qemu-utils e2fsprogs busybox-static)", tool)
		}
	}
	if _, _, err := image.FindKernel(""); err != nil {
		return err
	}
	root := filepath.Join(dir, "tpl", "rootfs")
	for _, d := range []string{"bin", "etc", "tmp", "root", "home/user", "proc", "sys", "dev", "run", "usr/local/bin", "var"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	_ = os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	_ = os.Chown(filepath.Join(root, "home/user"), 1000, 1000)
	bb, _ := exec.LookPath("busybox")
	if out, err := exec.Command("cp", bb, filepath.Join(root, "bin/busybox")).CombinedOutput(); err != nil {
		return fmt.Errorf("copy busybox: %v: %s", err, out)
	}
	for _, a := range []string{"sh", "cat", "ls", "echo", "sleep", "uname", "true", "id", "ps", "touch", "sync", "date", "mkdir", "mount", "head", "yes",
		"ln", "mknod", "mkfifo", "stat", "dd", "rm", "chown", "chmod", "grep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
		"etc/group":  "root:x:0:\ntty:x:5:\nuser:x:1000:\n",
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			return err
		}
	}
	if err := goBuild(filepath.Join(root, "usr/local/bin/envd"), "github.com/moatsh/moat/cmd/envd"); err != nil {
		return err
	}
	if err := goBuild(filepath.Join(dir, "moat-nfsd"), "github.com/moatsh/moat/cmd/moat-nfsd"); err != nil {
		return err
	}
	return goBuild(filepath.Join(dir, "moat-vminit"), "github.com/moatsh/moat/cmd/moat-vminit")
}

func goBuild(out, pkg string) error {
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v: %s", pkg, err, b)
	}
	return nil
}

// testRuntime returns the shared Runtime, in its own network scope.
func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	if setupErr != nil {
		testkit.Missing(t, "vm runtime tests: %v", setupErr)
	}
	sharedOnce.Do(func() {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		var m *netpolicy.Manager
		m, sharedErr = netpolicy.New(log, netpolicy.WithScope(testScope, "mv", netip.MustParsePrefix("10.231.0.0/16")))
		if sharedErr != nil {
			return
		}
		shared, sharedErr = New(context.Background(), runtime.Config{DataDir: filepath.Join(testDir, "data"), Logger: log},
			WithAccel("tcg"), WithNetwork(m), WithInit(filepath.Join(testDir, "moat-vminit")), WithNFSD(filepath.Join(testDir, "moat-nfsd")),
			WithCgroupParent(testCgroup), WithDiskFree(64), WithPrelaunch(0), // slots: slots_linux_test.go
			WithKeepPaused(0, 0)) // kept QEMUs: kept_linux_test.go
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func testSpec(id string) runtime.Spec {
	return runtime.Spec{ID: id, TemplateID: "tiny", RootfsDir: filepath.Join(testDir, "tpl", "rootfs"), VCPUs: 1, MemoryMiB: 256}
}

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// create makes a sandbox that is killed at the end of the test.
func create(t testing.TB, r *Runtime) *runtime.Handle { return createSpec(t, r, testSpec(newID())) }

// createSpec makes a sandbox of spec that is killed at the end of the test.
func createSpec(t testing.TB, r *Runtime, spec runtime.Spec) *runtime.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), h.ID) })
	return h
}

func health(h *runtime.Handle, timeout time.Duration) (int, error) {
	cl := &http.Client{Timeout: timeout, Transport: dialrace.NewTransport()}
	resp, err := cl.Get("http://" + envdAddr(h) + "/health")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// run executes argv in the sandbox as user through envd's process API.
func run(h *runtime.Handle, user string, timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return runCtx(ctx, h, user, argv...)
}

func runCtx(ctx context.Context, h *runtime.Handle, user string, argv ...string) (string, error) {
	// No pooled connections: a killed sandbox's address is reused by a new
	// one, and a stale keep-alive connection would be answered with a reset.
	hc := &http.Client{Transport: dialrace.NewTransport()}
	pc := processconnect.NewProcessClient(hc, "http://"+envdAddr(h), connect.WithProtoJSON())
	req := connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: argv[0], Args: argv[1:]}})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	exit := ""
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		out.Write(ev.GetData().GetStderr())
		if end := ev.GetEnd(); end != nil && (!end.GetExited() || end.GetExitCode() != 0) {
			exit = end.GetStatus()
		}
	}
	if err := stream.Err(); err != nil {
		return out.String(), err
	}
	if exit != "" {
		return out.String(), fmt.Errorf("%v: %s", argv, exit)
	}
	return out.String(), nil
}

func TestCreateRunPauseKill(t *testing.T) {
	r := testRuntime(t)
	h := create(t, r)
	if code, err := health(h, 5*time.Second); err != nil || code != http.StatusNoContent {
		t.Fatalf("/health = %d, %v", code, err)
	}
	hostUname, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	guestUname, err := run(h, "user", 30*time.Second, "uname", "-r")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(guestUname) == "" || strings.TrimSpace(guestUname) == strings.TrimSpace(string(hostUname)) {
		t.Fatalf("guest kernel %q, host kernel %q: want a different kernel", guestUname, hostUname)
	}
	t.Logf("guest kernel %s, host kernel %s", strings.TrimSpace(guestUname), strings.TrimSpace(string(hostUname)))
	checkRestoreStubs(t, h)
	// TCG guests run without ASLR (qemu.Machine.KernelArgs: translations
	// are cached per virtual address).
	if out, err := run(h, "user", 30*time.Second, "cat", "/proc/sys/kernel/randomize_va_space"); err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("randomize_va_space in a TCG guest = %q, %v; want 0", out, err)
	}
	// ... and trust the TSC (tsc=reliable): on the jiffies clocksource an
	// idle guest takes 250 timer interrupts a second per vCPU.
	if out, err := run(h, "user", 30*time.Second, "cat", "/sys/devices/system/clocksource/clocksource0/current_clocksource"); err != nil || strings.TrimSpace(out) != "tsc" {
		t.Errorf("clocksource of a TCG guest = %q, %v; want tsc", out, err)
	}
	// After a restore the guest reseeded its CRNG and took the host's time.
	console := qemu.TailFile(filepath.Join(r.sandboxDir(h.ID), "console.log"), 4096)
	if !strings.Contains(console, guestinit.RestoredMarker+": crng reseeded") {
		t.Errorf("console lacks the restore marker: %q", console)
	}
	if out, err := run(h, "user", 30*time.Second, "date", "+%s"); err != nil {
		t.Error(err)
	} else if gs, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64); time.Since(time.Unix(gs, 0)).Abs() > 10*time.Second {
		t.Errorf("guest clock %s, host %s", time.Unix(gs, 0).UTC(), time.Now().UTC())
	}
	secret := filepath.Join(testDir, "host-secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(h, "root", 30*time.Second, "cat", secret); err == nil || strings.Contains(out, "host only") {
		t.Fatalf("host file visible in the guest: %q, %v", out, err)
	}
	st, err := r.Stats(context.Background(), h.ID)
	if err != nil || st.MemoryBytes == 0 || st.MemoryLimit == 0 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	if err := r.Pause(context.Background(), h.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := health(h, 500*time.Millisecond); err == nil {
		t.Fatal("paused sandbox answered /health")
	}
	if h, err = r.Resume(context.Background(), h.ID); err != nil {
		t.Fatal(err)
	}
	if code, err := health(h, 5*time.Second); err != nil || code != http.StatusNoContent {
		t.Fatalf("/health after resume = %d, %v", code, err)
	}
	checkRestoreStubs(t, h)
	killAndCheck(t, r, h)
}

// checkRestoreStubs: the QEMU of a restored sandbox was given the stubs of
// the kernel and initramfs (qemu.RestoreStubs), not the 24 MiB of both.
func checkRestoreStubs(t *testing.T, h *runtime.Handle) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.PID))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args[:len(args)-1] {
		if (a == "-kernel" || a == "-initrd") && !strings.HasSuffix(args[i+1], ".restore-stub") {
			t.Errorf("restored QEMU got %s %s, want its restore stub", a, args[i+1])
		}
	}
}

func TestClonesDivergeAndCrashAlone(t *testing.T) {
	r := testRuntime(t)
	a, b := create(t, r), create(t, r)
	if _, err := run(a, "root", 30*time.Second, "sh", "-c", "echo from-a > /root/mark && sync"); err != nil {
		t.Fatalf("%v; console: %s", err, qemu.TailFile(filepath.Join(r.sandboxDir(a.ID), "console.log"), 4096))
	}
	if out, err := run(a, "root", 30*time.Second, "cat", "/root/mark"); err != nil || strings.TrimSpace(out) != "from-a" {
		t.Fatalf("A reads its file: %q, %v", out, err)
	}
	if out, err := run(b, "root", 30*time.Second, "cat", "/root/mark"); err == nil {
		t.Fatalf("B sees A's file: %q", out)
	}
	// Clones must not share the guest kernel's random state.
	ua, errA := run(a, "user", 30*time.Second, "cat", "/proc/sys/kernel/random/uuid")
	ub, errB := run(b, "user", 30*time.Second, "cat", "/proc/sys/kernel/random/uuid")
	if errA != nil || errB != nil || ua == ub {
		t.Errorf("random uuid: A %q (%v), B %q (%v): want different", ua, errA, ub, errB)
	}
	// A kernel panic in A (panic=-1 + -no-reboot) ends A's QEMU only.
	// The request never gets an answer (the VM is gone, nothing resets the
	// connection), so it runs in the background until A is dead.
	crashCtx, stopCrash := context.WithCancel(context.Background())
	defer stopCrash()
	crashErr := make(chan error, 1)
	go func() {
		out, err := runCtx(crashCtx, a, "root", "sh", "-c", "echo c > /proc/sysrq-trigger")
		crashErr <- fmt.Errorf("out %q: %w", out, err)
	}()
	wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if st, err := r.Wait(wctx, a.ID); err != nil {
		var cerr error
		select {
		case cerr = <-crashErr:
		default:
		}
		b, err := os.ReadFile(filepath.Join(r.sandboxDir(a.ID), "console.log"))
		t.Fatalf("A still alive 60 s after the panic (crash request: %v); console (%v): %s", cerr, err, b)
	} else {
		t.Logf("A's qemu ended: %s", st)
	}
	if !running(r, b.ID) {
		t.Fatal("B died with A")
	}
	if code, err := health(b, 5*time.Second); err != nil || code != http.StatusNoContent {
		t.Fatalf("B /health = %d, %v", code, err)
	}
	killAndCheck(t, r, a)
	killAndCheck(t, r, b)
}

// killAndCheck kills h twice and checks that nothing of it is left.
func killAndCheck(t *testing.T, r *Runtime, h *runtime.Handle) {
	t.Helper()
	for i := 0; i < 2; i++ {
		if err := r.Kill(context.Background(), h.ID); err != nil {
			t.Fatalf("Kill #%d: %v", i+1, err)
		}
	}
	if running(r, h.ID) {
		t.Error("running after Kill")
	}
	// A zombie's command line reads empty.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.PID)); err == nil && len(b) > 0 {
		t.Errorf("qemu %d still runs", h.PID)
	}
	for _, p := range []string{r.sandboxDir(h.ID), filepath.Join("/run/netns", testScope+"-"+h.ID)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
	if !cgroupGone(r, h.ID) {
		t.Errorf("cgroup %s left behind", r.cgroupPath(h.ID))
	}
	if pids := qemuPIDs(r.sandboxDir(h.ID)); len(pids) > 0 {
		t.Errorf("processes %v left behind", pids)
	}
	if ms := mountsOf(h.ID); len(ms) > 0 {
		t.Errorf("mounts %v left behind", ms)
	}
}

// mountsOf lists the host mount points whose path contains id.
func mountsOf(id string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(f[4], id) {
			out = append(out, f[4])
		}
	}
	return out
}

func TestRecoverAdoptsLiveAndRemovesOthers(t *testing.T) {
	r := testRuntime(t)
	keep, drop := create(t, r), create(t, r)
	// A second Runtime over the same data dir plays the restarted server.
	dropQMP(r, keep.ID)
	r2 := &Runtime{log: r.log, dir: r.dir, o: r.o, net: r.net, tscKHz: r.tscKHz, ids: r.ids, launcher: r.launcher,
		slots: slots.New(r.log, 0, slotKeys, 0, r.Kill), kept: kept.New(0, 0, nil)}
	r2.tpl = templatesnap.New(r2.templateConfig())
	hs, err := r2.Recover(context.Background(), []string{keep.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].ID != keep.ID || hs[0].PID != keep.PID || hs[0].Addr != keep.Addr {
		t.Fatalf("Recover = %+v, want %+v", hs, keep)
	}
	if !running(r2, keep.ID) {
		t.Fatal("adopted sandbox not running")
	}
	if code, err := health(keep, 5*time.Second); err != nil || code != http.StatusNoContent {
		t.Fatalf("adopted /health = %d, %v", code, err)
	}
	if _, err := os.Stat(r.sandboxDir(drop.ID)); err == nil {
		t.Fatal("orphan's directory survived Recover")
	}
	// The adopted VM's console is connected again: a pause (which waits
	// for a console marker) and a resume work.
	if err := r2.Pause(context.Background(), keep.ID); err != nil {
		t.Fatalf("pause of the adopted sandbox: %v", err)
	}
	if keep, err = r2.Resume(context.Background(), keep.ID); err != nil {
		t.Fatalf("resume of the adopted sandbox: %v", err)
	}
	killAndCheck(t, r2, keep)
	_ = r.Kill(context.Background(), drop.ID) // drops r's bookkeeping
}

// BenchmarkCreateFromSnapshot measures Create → envd /health from the
// template snapshot (taken before the timer starts).
func BenchmarkCreateFromSnapshot(b *testing.B) {
	r := testRuntime(b)
	_ = create(b, r) // takes the snapshot
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		h, err := r.Create(context.Background(), testSpec(newID()))
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		_ = r.Kill(context.Background(), h.ID)
		b.StartTimer()
	}
	reportMedian(b, ds)
}

// BenchmarkColdBoot measures a full template boot to envd /health plus the
// snapshot save (a new memory size each time defeats the cache).
func BenchmarkColdBoot(b *testing.B) {
	r := testRuntime(b)
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		spec := testSpec(newID())
		spec.MemoryMiB = 200 + 8*i
		t0 := time.Now()
		s, err := r.tpl.Ensure(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		_ = os.RemoveAll(s.Dir)
		b.StartTimer()
	}
	reportMedian(b, ds)
}

func reportMedian(b *testing.B, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), "median-ms")
	}
}

// TestAccelAuto: with accel auto the runtime picks kvm or tcg, and tcg
// when there is no /dev/kvm (BenchmarkAccelAuto times the choice).
func TestAccelAuto(t *testing.T) {
	r := testRuntime(t)
	got, _, err := machineAccel(r, "auto")
	if err != nil || (got != "tcg" && got != "kvm") {
		t.Fatalf("MachineBase = %q, %v", got, err)
	}
	if _, statErr := os.Stat("/dev/kvm"); statErr != nil && got != "tcg" {
		t.Fatalf("no /dev/kvm but accelerator %q", got)
	}
	t.Logf("auto picked %s", got)
}

// machineAccel resolves the accelerator of a new template set of r's
// configuration with accel, and times it.
func machineAccel(r *Runtime, accel string) (string, time.Duration, error) {
	cfg := r.tpl.Config
	cfg.Accel = accel
	start := time.Now()
	_, got, err := templatesnap.New(cfg).MachineBase(context.Background())
	return got, time.Since(start), err
}

// BenchmarkAccelAuto times the accelerator choice of accel auto (a KVM
// probe boot when /dev/kvm opens) against the baseline of a configured
// tcg (no probe), alternated in the same run; it prints both medians and
// their ratio.
func BenchmarkAccelAuto(b *testing.B) {
	r := testRuntime(b)
	var auto, configured []time.Duration
	picked := ""
	for b.Loop() {
		if _, d, err := machineAccel(r, "tcg"); err != nil {
			b.Fatalf("MachineBase with accel tcg: %v", err)
		} else {
			configured = append(configured, d)
		}
		got, d, err := machineAccel(r, "auto")
		if err != nil {
			b.Fatalf("MachineBase with accel auto: %v", err)
		}
		picked, auto = got, append(auto, d)
	}
	ma, mc := median(auto), median(configured)
	fmt.Printf("accel auto (picked %s): median %v; configured tcg: median %v; auto/configured %.2f (%d rounds)\n",
		picked, ma.Round(time.Millisecond), mc.Round(time.Millisecond), float64(ma)/float64(max(mc, 1)), len(auto))
	b.ReportMetric(float64(ma.Microseconds())/1000, "auto-median-ms")
	b.ReportMetric(float64(ma)/float64(max(mc, 1)), "auto/configured")
}

// running reports whether id's QEMU runs: a Wait is still blocked after a
// moment.
func running(r *Runtime, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.Wait(ctx, id)
	return errors.Is(err, context.DeadlineExceeded)
}

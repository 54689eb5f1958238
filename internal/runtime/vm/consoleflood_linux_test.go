package vm

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/testkit"
)

// vmRSS is this process's resident set size (VmRSS) in bytes.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestConsoleFloodBounded: guest root floods its console; the host keeps
// at most the ring in memory and 2×qemu.ConsoleFileCap on disk, and pausing
// the flooding guest (which waits for a console marker) costs the server
// no memory to speak of.
func TestConsoleFloodBounded(t *testing.T) {
	r := testRuntime(t)
	h := create(t, r)
	line := strings.Repeat("flood", 20)
	out, err := run(h, "root", 30*time.Second, "sh", "-c", "(while :; do echo "+line+"; done > /dev/console 2>&1 &) ; echo started")
	if err != nil || !strings.Contains(out, "started") {
		t.Fatalf("start flood: %v %q", err, out)
	}
	b, _ := r.boxes.Lookup(h.ID)
	con := b.proc.Con
	dir := r.sandboxDir(h.ID)
	start := time.Now()
	total0, _ := con.Stats()
	// 15 s (some 3.5 MiB at the ~240 KiB/s a guest floods with: past the
	// ring and a rotation of the mirror file); the full tier floods 60 s,
	// as the issue asks. MOAT_TEST_FLOOD_SECONDS sets it by hand.
	floodFor := 15 * time.Second
	if testkit.Full() {
		floodFor = 60 * time.Second
	}
	if v, err := strconv.Atoi(os.Getenv("MOAT_TEST_FLOOD_SECONDS")); err == nil && v > 0 {
		floodFor = time.Duration(v) * time.Second
	}
	for time.Since(start) < floodFor {
		time.Sleep(time.Second) // the flood goes on; the files must stay under their cap all along
		checkConsoleFiles(t, dir)
	}
	total, dropped := con.Stats()
	rate := float64(total-total0) / time.Since(start).Seconds()
	t.Logf("flood: %d bytes in %v (%.0f KiB/s), ring holds %d, dropped %d", total-total0,
		time.Since(start).Round(time.Second), rate/1024, total-dropped, dropped)
	if total-total0 < 2*qemu.ConsoleRing || total-dropped > qemu.ConsoleRing {
		t.Errorf("flood total %d, dropped %d: the guest did not flood or the ring grew", total-total0, dropped)
	}
	debug.FreeOSMemory()
	before := vmRSS(t)
	ctx := context.Background()
	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	after := vmRSS(t)
	t.Logf("pause of the flooding guest: RSS %d → %d KiB (%+d KiB)", before>>10, after>>10, (after-before)>>10)
	if after-before > 4<<20 {
		t.Errorf("pause grew the RSS by %d KiB", (after-before)>>10)
	}
	checkConsoleFiles(t, dir)
	h2, err := r.Resume(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(h2, "root", 30*time.Second, "true"); err != nil {
		t.Errorf("after resume: %v", err)
	}
}

func checkConsoleFiles(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"console.log", "console.log.1"} {
		if fi, err := os.Lstat(filepath.Join(dir, f)); err == nil && fi.Size() > qemu.ConsoleFileCap {
			t.Errorf("%s: %d bytes (cap %d)", f, fi.Size(), qemu.ConsoleFileCap)
		}
	}
}

package vm

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/image"
)

// guestDisk is what the guest sees: its disk's size (/sys/block/vda/size)
// and its root file system's size (busybox df, statfs).
func guestDisk(t *testing.T, h *runtime.Handle) (dev, fs int64) {
	t.Helper()
	f := strings.Fields(sh(t, h, "cat /sys/block/vda/size; busybox df -k / | busybox tail -n 1"))
	if len(f) < 3 {
		t.Fatalf("guest disk: %q", f)
	}
	sectors, err1 := strconv.ParseInt(f[0], 10, 64)
	kib, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("guest disk: %q", f)
	}
	return sectors * 512, kib << 10
}

// envdDiskTotal is the root file system size envd's /metrics reports (what
// the orchestrator's metrics show for a VM, whose Stats.DiskTotal is 0).
func envdDiskTotal(t *testing.T, h *runtime.Handle) uint64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + envdAddr(h) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		DiskTotal uint64 `json:"disk_total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("envd /metrics: %d, %v", resp.StatusCode, err)
	}
	return m.DiskTotal
}

// checkSize fails unless the guest's disk is exactly want bytes and its
// root file system within 5 % of it (ext4's own metadata is not counted).
func checkSize(t *testing.T, what string, h *runtime.Handle, want int64) {
	t.Helper()
	dev, fs := guestDisk(t, h)
	if dev != want {
		t.Errorf("%s: guest disk %d bytes, want %d", what, dev, want)
	}
	if fs < want*95/100 || fs > want {
		t.Errorf("%s: root file system %d MiB, want about %d MiB", what, fs>>20, want>>20)
	}
	if et := envdDiskTotal(t, h); et < uint64(want)*95/100 || et > uint64(want) {
		t.Errorf("%s: envd /metrics disk_total %d MiB, want about %d MiB", what, et>>20, want>>20)
	}
	t.Logf("%s: disk %d MiB, file system %d MiB", what, dev>>20, fs>>20)
}

func TestDiskSize(t *testing.T) {
	r := testRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The default (no DiskMiB) keeps the template's disk.
	def := create(t, r)
	img, err := image.Qcow2Size(diskOf(r, def.ID))
	if err != nil {
		t.Fatal(err)
	}
	dev, fs := guestDisk(t, def)
	if dev != img || fs > img || fs < img*80/100 {
		t.Errorf("default: guest disk %d bytes, file system %d, want the image's %d", dev, fs, img)
	}

	const want = int64(4096) << 20
	spec := testSpec(newID())
	spec.DiskMiB = 4096
	h, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), h.ID) })
	checkSize(t, "created", h, want)
	// The grown file system is usable beyond the image's old end.
	sh(t, h, "busybox dd if=/dev/zero of=/root/big bs=1M count=8 seek="+strconv.FormatInt(img>>20, 10)+" 2>/dev/null && sync && rm /root/big")

	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	if h, err = r.Resume(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	checkSize(t, "resumed", h, want)

	snapID := "s" + newID()
	if err := r.Snapshot(ctx, h.ID, snapID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.DeleteSnapshot(context.Background(), snapID) })
	// The template's snapshot was taken at 4096 MiB (created needed no
	// grow); a fork asking for more is grown online as it is restored.
	fspec := testSpec(newID())
	fspec.Snapshot, fspec.RootfsDir, fspec.DiskMiB = snapID, "", 5120
	f, err := r.Create(ctx, fspec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), f.ID) })
	checkSize(t, "fork", f, 5120<<20)
	for _, f := range []string{"console.log", "console.log.1"} { // created, resumed
		if b, _ := os.ReadFile(filepath.Join(r.sandboxDir(h.ID), f)); strings.Contains(string(b), guestinit.GrownMarker) {
			t.Errorf("restored from a snapshot of its disk size, the guest grew its file system (%s): %q", f, b)
		}
	}

	// A disk cannot shrink: asking for less than the snapshot's is refused.
	small := testSpec(newID())
	small.Snapshot, small.RootfsDir, small.DiskMiB = snapID, "", 1024
	if _, err := r.Create(ctx, small); !errdefs.IsInvalidArgument(err) {
		t.Errorf("create from a 4 GiB snapshot with DiskMiB 1024: %v, want ErrInvalidArgument", err)
	}
	killAndCheck(t, r, f)
	killAndCheck(t, r, h)
}

func diskOf(r *Runtime, id string) string { return r.sandboxDir(id) + "/disk.qcow2" }

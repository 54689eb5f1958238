package vm

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// TestQEMULogCapped: QEMU's stdout/stderr file cannot grow past qemu.LogCap
// whatever is written to it, and Kill leaves no mount behind.
func TestQEMULogCapped(t *testing.T) {
	r := testRuntime(t)
	h := create(t, r)
	// Write through QEMU's own stderr descriptor, as QEMU would.
	f, err := os.OpenFile("/proc/"+strconv.Itoa(h.PID)+"/fd/2", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	var written int64
	for written < 64<<20 {
		n, err := f.Write(chunk)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write after %d bytes: %v, want ENOSPC", written, err)
			}
			break
		}
	}
	fi, err := os.Stat(qemu.LogPath(r.sandboxDir(h.ID)))
	if err != nil {
		t.Fatal(err)
	}
	if written > qemu.LogCap || fi.Size() > qemu.LogCap {
		t.Fatalf("wrote %d bytes, log is %d bytes: want at most %d", written, fi.Size(), qemu.LogCap)
	}
	t.Logf("log full after %d bytes (file %d bytes)", written, fi.Size())
	if ms := mountsOf(h.ID); !slices.Contains(ms, qemu.LogDir(r.sandboxDir(h.ID))) {
		t.Errorf("mounts of %s: %v, want the log tmpfs", h.ID, ms)
	}
	// The full log does not hurt QEMU or the guest.
	if code, err := health(h, 5*time.Second); err != nil || code != 204 {
		t.Fatalf("/health with a full log = %d, %v", code, err)
	}
	// A pause leaves nothing mounted; resume mounts a fresh log.
	if err := r.Pause(context.Background(), h.ID); err != nil {
		t.Fatal(err)
	}
	waitTornDown(t, r, h.ID)
	if ms := mountsOf(h.ID); len(ms) != 0 {
		t.Errorf("paused sandbox has mounts %v", ms)
	}
	if h, err = r.Resume(context.Background(), h.ID); err != nil {
		t.Fatal(err)
	}
	killAndCheck(t, r, h)
}

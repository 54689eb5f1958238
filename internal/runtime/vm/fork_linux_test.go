package vm

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// fork creates a sandbox from snapshot snapID, killed at the end of the test.
func fork(t *testing.T, r *Runtime, snapID string) (*runtime.Handle, error) {
	spec := testSpec(newID())
	spec.Snapshot, spec.RootfsDir = snapID, "" // a snapshot needs no template rootfs
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := r.Create(ctx, spec)
	if err == nil {
		t.Cleanup(func() { _ = r.Kill(context.Background(), h.ID) })
	}
	return h, err
}

// forkConcurrently creates n sandboxes from snapID at the same time.
func forkConcurrently(t *testing.T, r *Runtime, snapID string, n int) []*runtime.Handle {
	t.Helper()
	var wg sync.WaitGroup
	forks := make([]*runtime.Handle, n)
	errs := make([]error, n)
	for i := range forks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			forks[i], errs[i] = fork(t, r, snapID)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
	}
	return forks
}

func TestSnapshotFork(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	src := create(t, r)
	sh(t, src, "echo from-source > /root/file && echo source-ram > /dev/shm/value && "+counterLoop)
	c := waitCounterAbove(t, src, 1)
	snapID := "s" + newID()
	t.Cleanup(func() { _ = r.DeleteSnapshot(context.Background(), snapID) })
	if err := r.Snapshot(ctx, src.ID, snapID); err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(ctx, src.ID, snapID); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Snapshot as %s: %v, want ErrAlreadyExists", snapID, err)
	}
	// The source keeps running, with a correct clock.
	waitCounterAbove(t, src, counter(t, src))
	checkGuestClock(t, src)

	forks := forkConcurrently(t, r, snapID, 3)
	for i, h := range forks {
		if got := sh(t, h, "cat /root/file /dev/shm/value"); got != "from-source\nsource-ram" {
			t.Errorf("fork %d sees %q", i, got)
		}
		if n := counter(t, h); n < c {
			t.Errorf("fork %d: counter %d, below the source's %d before the snapshot", i, n, c)
		}
		waitCounterAbove(t, h, counter(t, h)) // the source's background process runs on in every fork
		sh(t, h, "echo fork-"+strconv.Itoa(i)+" > /root/file")
	}
	for i, h := range forks {
		if got := sh(t, h, "cat /root/file"); got != "fork-"+strconv.Itoa(i) {
			t.Errorf("fork %d reads %q", i, got)
		}
	}
	if got := sh(t, src, "cat /root/file"); got != "from-source" {
		t.Errorf("source reads %q after the forks wrote", got)
	}

	killAndCheck(t, r, src)
	late, err := fork(t, r, snapID)
	if err != nil {
		t.Fatalf("fork after the source was killed: %v", err)
	}
	if got := sh(t, late, "cat /root/file"); got != "from-source" {
		t.Errorf("late fork sees %q", got)
	}

	if err := r.DeleteSnapshot(ctx, snapID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.snapshotDir(snapID)); err == nil {
		t.Error("snapshot directory survived DeleteSnapshot")
	}
	if err := r.DeleteSnapshot(ctx, snapID); err != nil {
		t.Errorf("DeleteSnapshot of a deleted snapshot: %v", err)
	}
	if _, err := fork(t, r, snapID); !errdefs.IsNotFound(err) {
		t.Errorf("fork of a deleted snapshot: %v, want ErrNotFound", err)
	}
	// Forks do not depend on their snapshot: a pause and resume still work.
	if err := r.Pause(ctx, late.ID); err != nil {
		t.Fatal(err)
	}
	if late, err = r.Resume(ctx, late.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, late, "cat /root/file /dev/shm/value"); got != "from-source\nsource-ram" {
		t.Errorf("late fork after pause: %q", got)
	}
}

func TestSnapshotMismatch(t *testing.T) {
	r := testRuntime(t)
	snapID := "s" + newID()
	dir := r.snapshotDir(snapID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := snapshot.WriteMeta(dir, &snapshot.Meta{Accel: "kvm", VCPUs: 1, MemMiB: 256, Kernel: "/k", Initramfs: "/i",
		BootVersion: "0.0", BootKey: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fork(t, r, snapID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("fork of a snapshot from another kernel: %v, want ErrFailedPrecondition", err)
	}
}
